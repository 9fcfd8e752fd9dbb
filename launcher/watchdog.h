// A small process forked from hvdrun that outlives it: hvdrun tells it each worker's
// process group over a pipe; if the pipe closes without a "disarm" (hvdrun was killed,
// even by SIGKILL), it sends SIGTERM to every group, waits the grace period and sends
// SIGKILL. This is how no worker survives its launcher.
#pragma once

#include <sys/types.h>

#include <utility>

#include "common/result.h"
#include "common/unique_fd.h"

namespace hvdrun {

class Watchdog {
 public:
  static Result<Watchdog> start(double grace_seconds);
  Watchdog(Watchdog&& o) noexcept : pipe_(std::move(o.pipe_)), pid_(std::exchange(o.pid_, -1)) {}
  Watchdog& operator=(Watchdog&&) = delete;
  ~Watchdog();

  void watch(pid_t pgid);
  // That group has ended (its leader reaped, nothing left in it): its id is free and may
  // become another process's, which a later clean-up must not signal.
  void forget(pid_t pgid);
  // Normal end: every group is already gone; the watchdog exits without killing anything.
  void disarm();
  pid_t pid() const { return pid_; }
  // The pipe's write end: a worker being spawned writes its process group there itself
  // (SpawnRequest::register_fd), as watch() does.
  int fd() const { return pipe_.get(); }

 private:
  Watchdog() = default;
  UniqueFd pipe_;
  pid_t pid_ = -1;
};

}  // namespace hvdrun
