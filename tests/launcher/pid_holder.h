// Test helper: a child that takes a given pid (clone3 with set_tid), so that a test can
// hand a freed pid to a process hvdrun must not touch.
#pragma once

#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace hvdrun {

// Forks a child with pid `pid` that leads a process group of that id and pauses until it
// is killed. Returns its pid in the parent, or -1 with errno set (no CAP_SYS_ADMIN, the pid
// is in use, an old kernel).
inline long clone_holding_pid(pid_t pid) {
  clone_args ca{};
  ca.exit_signal = SIGCHLD;
  pid_t want = pid;
  ca.set_tid = reinterpret_cast<uint64_t>(&want);
  ca.set_tid_size = 1;
  long child = syscall(SYS_clone3, &ca, sizeof ca);
  if (child == 0) {
    setpgid(0, 0);
    while (true) pause();
  }
  return child;
}

}  // namespace hvdrun
