// Where workers' output goes. The agent splits each stream into whole lines and hands
// them over in batches; a sink tags them ("[3]<stdout>:"), writes them to hvdrun's own
// stdout/stderr and, with --output-filename, to DIR/rank.N/{stdout,stderr}.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "launcher/async_writer.h"

namespace hvdrun {

enum class StreamKind { kStdout = 0, kStderr = 1 };

class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // `lines` holds one or more complete lines, each with its terminator.
  virtual void write_lines(int rank, StreamKind stream, std::string_view lines) = 0;
  // True while the sink holds so much unwritten output that the agent should stop reading.
  virtual bool congested() const = 0;
  // One line from hvdrun itself ("hvdrun: rank 2 ... exited with code 7"), ordered after
  // the worker output already handed over.
  virtual void notice(std::string_view line) = 0;
  // Writes everything still queued.
  virtual void drain() = 0;
};

struct TaggedOutputOptions {
  int size = 1;                 // job size: the width of rank numbers in file names
  std::string output_dir;       // --output-filename, "" for none
  bool timestamps = false;      // --prefix-output-with-timestamp
  int stdout_fd = 1, stderr_fd = 2;
};

// "[rank]<stdout>:" prefix, optionally preceded by a timestamp.
std::string tag_line_prefix(int rank, StreamKind stream, bool timestamps);

class TaggedOutput : public OutputSink {
 public:
  // Creates DIR/rank.N/ for the given ranks when output_dir is set.
  static Result<std::unique_ptr<TaggedOutput>> create(const TaggedOutputOptions& opts, const std::vector<int>& ranks);

  void write_lines(int rank, StreamKind stream, std::string_view lines) override;
  bool congested() const override;
  void notice(std::string_view line) override;
  void drain() override;
  // `fn` is called (from a writer thread) when hvdrun's stdout or stderr has no reader any
  // more (EPIPE): `hvdrun ... | head -1` once head has exited. nullptr clears it.
  void on_reader_gone(std::function<void()> fn);
  // `fn` is called once, with a one-line message, when a write to an --output-filename file
  // fails (the disk is full, ...); the files are not written from then on. Called from the
  // thread that writes the lines. nullptr clears it.
  void on_file_failure(std::function<void(std::string message)> fn);

 private:
  explicit TaggedOutput(const TaggedOutputOptions& opts);

  TaggedOutputOptions opts_;
  AsyncWriter out_, err_;
  std::unordered_map<int, std::array<UniqueFd, 2>> files_;  // rank -> {stdout, stderr}
  std::unordered_map<int, std::array<std::string, 2>> paths_;  // rank -> their paths
  std::mutex file_failure_mu_;
  std::function<void(std::string)> on_file_failure_;
  bool file_failed_ = false;  // a write failed: the files are given up
};

// The job's sink, less repeated notices: every agent that Slurm (or a signal to the
// whole session) ends says so, and once is enough.
class OnceNoticeSink : public OutputSink {
 public:
  explicit OnceNoticeSink(OutputSink& inner) : inner_(inner) {}
  void write_lines(int rank, StreamKind stream, std::string_view lines) override { inner_.write_lines(rank, stream, lines); }
  bool congested() const override { return inner_.congested(); }
  void notice(std::string_view line) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!seen_.insert(std::string(line)).second) return;
    }
    inner_.notice(line);
  }
  void drain() override { inner_.drain(); }

 private:
  OutputSink& inner_;
  std::mutex mu_;
  std::set<std::string> seen_;
};

}  // namespace hvdrun
