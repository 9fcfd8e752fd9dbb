// Writes to one fd from its own thread, so that the launcher's event loop never blocks
// on a slow reader of hvdrun's output. The loop asks backlog() and stops reading from
// workers while it is above a high-water mark (back pressure, never loss). An agent also
// feeds a remote rank 0's stdin pipe through one (it owns that fd and closes it at the end
// of the input).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/unique_fd.h"

namespace hvdrun {

class AsyncWriter {
 public:
  explicit AsyncWriter(int fd);
  explicit AsyncWriter(UniqueFd owned);  // closes it (see close_after_queued)
  ~AsyncWriter();  // drains what is queued, then joins
  AsyncWriter(const AsyncWriter&) = delete;
  AsyncWriter& operator=(const AsyncWriter&) = delete;

  // Queues `data`; with a capacity set, first waits while the queue holds data and `data`
  // would take it past the capacity (back pressure on the caller: the queue never grows
  // past it by more than one write).
  void write(std::string data);
  // The bound for write(); unbounded by default (callers that pace themselves by backlog()).
  void set_capacity(size_t bytes);
  size_t backlog() const;
  // Blocks until everything queued has been written (or the fd failed).
  void drain();
  // The end of the data: once what is queued is written, the owned fd is closed (its
  // reader sees EOF); later writes are dropped. Does not block.
  void close_after_queued();
  // Called once, from the writer's thread, with the errno of the first failed write
  // (EPIPE: the reader went away); output is dropped from then on. Set before it matters;
  // set to nullptr before what it refers to goes away (it runs under the writer's lock).
  void on_failure(std::function<void(int err)> fn);
  // Called from the writer's thread, outside its lock, with the bytes that left the queue:
  // written, or dropped because a write failed (`failed`: the reader is gone, and what comes
  // later is dropped too). Set before the first write().
  void on_done(std::function<void(size_t bytes, bool failed)> fn);
  // For a writer that is never destroyed (the agent's of rank 0's stdin, whose thread may
  // still be blocked writing when the process exits): its thread is detached when it starts,
  // never joined. Call before the first write().
  void detach_thread();

 private:
  void run();

  int fd_;
  UniqueFd owned_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  size_t capacity_ = SIZE_MAX;
  bool busy_ = false;
  bool stop_ = false;
  bool closing_ = false;
  bool failed_ = false;  // the reader went away (EPIPE): output is dropped from then on
  std::function<void(int)> on_failure_;
  std::function<void(size_t, bool)> on_done_;
  bool started_ = false;  // the thread was started (it starts with the first write)
  bool detach_ = false;
  std::thread thread_;
};

}  // namespace hvdrun
