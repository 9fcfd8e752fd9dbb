// A small process forked from hvdrun that outlives it: it knows each worker's process
// group from the table it shares with hvdrun (group_table.h; its pipe when that is full);
// if the pipe closes without a "disarm" (hvdrun was killed, even by SIGKILL), it sends
// SIGTERM to every group, waits the grace period and sends SIGKILL. This is how no worker
// survives its launcher.
#pragma once

#include <sys/types.h>

#include <utility>

#include "common/result.h"
#include "common/unique_fd.h"
#include "launcher/group_table.h"

namespace hvdrun {

class Watchdog {
 public:
  static Result<Watchdog> start(double grace_seconds);
  Watchdog(Watchdog&& o) noexcept
      : pipe_(std::move(o.pipe_)), pid_(std::exchange(o.pid_, -1)), table_(std::exchange(o.table_, nullptr)) {}
  Watchdog& operator=(Watchdog&&) = delete;
  ~Watchdog();

  void watch(pid_t pgid);
  // That group has ended (its leader reaped, nothing left in it): its id is free and may
  // become another process's, which a later clean-up must not signal.
  void forget(pid_t pgid);
  // Normal end: every group is already gone; the watchdog exits without killing anything.
  void disarm();
  pid_t pid() const { return pid_; }
  // Where a worker being spawned adds its process group itself (SpawnRequest::
  // register_table), as watch() does; the pipe's write end when the table is full
  // (SpawnRequest::register_fd).
  GroupTable* table() const { return table_; }
  int fd() const { return pipe_.get(); }

 private:
  Watchdog() = default;
  UniqueFd pipe_;
  pid_t pid_ = -1;
  GroupTable* table_ = nullptr;
};

}  // namespace hvdrun
