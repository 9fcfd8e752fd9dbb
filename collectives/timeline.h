// A rank's part of the job's Chrome trace (HVDRUN_TIMELINE): one JSON event per line,
// flushed as written, so that a killed job still leaves a loadable file (Chrome's trace
// format allows the closing bracket to be missing). hvdrun merges the ranks' files into
// one (launcher/timeline_merge). Each rank is a process row; each tensor name a thread row
// in it, going through its phases: QUEUE, NEGOTIATE_<OP>, MEMCPY_IN_FUSION_BUFFER, the
// transfer (ALLREDUCE, ...), MEMCPY_OUT_FUSION_BUFFER.
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/result.h"

namespace hvdrun {

class Timeline {
 public:
  // The file of `rank` for the job's timeline path: "<path>.rank<N>".
  static std::string rank_path(const std::string& path, int rank);
  // Creates that file (O_EXCL|O_NOFOLLOW): anything already at its path is an error, never
  // followed or overwritten. A failed write later prints one line and ends the file.
  static Result<std::unique_ptr<Timeline>> open(const std::string& path, int rank, const std::string& host,
                                                bool mark_cycles);
  ~Timeline();

  // Ends the tensor's current phase (if any) and starts `phase`.
  void phase(const std::string& tensor, const std::string& phase);
  // Ends the tensor's current phase.
  void done(const std::string& tensor);
  void instant(const std::string& what);  // a global mark (CYCLE_START)
  // In a forked child: drops what the fork copied of a line being written (the parent writes
  // it), so that the child's exit does not write it a second time.
  void drop_buffered_in_child();
  bool mark_cycles() const { return mark_cycles_; }
  const std::string& path() const { return path_; }

 private:
  Timeline(FILE* f, std::string path, int rank, bool mark_cycles)
      : f_(f), path_(std::move(path)), rank_(rank), mark_cycles_(mark_cycles) {}
  int tid_of(const std::string& tensor);  // under mu_
  void line(const std::string& json);     // under mu_
  void write(const std::string& text);    // under mu_; after a failed write, nothing more
  std::mutex mu_;
  FILE* f_;
  std::string path_;
  bool failed_ = false;
  int rank_;
  bool mark_cycles_;
  std::unordered_map<std::string, std::pair<int, std::string>> open_;  // tensor -> (tid, open phase)
  int next_tid_ = 1;
};

}  // namespace hvdrun
