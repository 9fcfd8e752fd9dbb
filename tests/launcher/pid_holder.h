// Test helper: a child that takes a given pid (clone3 with set_tid), so that a test can
// hand a freed pid to a process hvdrun must not touch.
#pragma once

#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace hvdrun {

// clone3 with set_tid: 0 in the child with pid `pid`, its pid in the parent, or -1.
inline long clone_with_pid(pid_t pid) {
  clone_args ca{};
  ca.exit_signal = SIGCHLD;
  pid_t want = pid;
  ca.set_tid = reinterpret_cast<uint64_t>(&want);
  ca.set_tid_size = 1;
  return syscall(SYS_clone3, &ca, sizeof ca);
}

// Forks a child with pid `pid` that leads a process group of that id and pauses until it
// is killed. Returns its pid in the parent, or -1 with errno set (no CAP_SYS_ADMIN, the pid
// is in use, an old kernel).
inline long clone_holding_pid(pid_t pid) {
  long child = clone_with_pid(pid);
  if (child == 0) {
    setpgid(0, 0);
    while (true) pause();
  }
  return child;
}

// As clone_holding_pid, but the child blocks every signal it can and reports on
// `report_fd`: one byte once it leads its group, then, at a SIGUSR1, the signals pending
// on it then (bit s set: signal s), 8 bytes. kill() makes a signal pending before it
// returns: whatever was sent to the child before the test's SIGUSR1 is in the report
// (SIGKILL, which cannot wait, ends it instead: the report never comes).
inline long clone_holding_pid_reporting(pid_t pid, int report_fd) {
  long child = clone_with_pid(pid);
  if (child == 0) {
    sigset_t all, usr1, pending;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, nullptr);
    setpgid(0, 0);
    char ready = 1;
    if (write(report_fd, &ready, 1) != 1) _exit(1);
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    int sig = 0;
    sigwait(&usr1, &sig);
    sigpending(&pending);
    uint64_t bits = 0;
    for (int s = 1; s < 64; ++s)
      if (sigismember(&pending, s) == 1) bits |= uint64_t{1} << s;
    if (write(report_fd, &bits, sizeof bits) != sizeof bits) _exit(1);
    while (true) pause();
  }
  return child;
}

}  // namespace hvdrun
