// Whether a thread is blocked in a system call (proc(5): /proc/PID/task/TID/syscall starts
// with the number of the call it is blocked in): a test orders "the waiter sleeps, then
// the wake (or the kill) comes" on that, not on a pause.
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace hvdrun::test_threads {

inline pid_t this_thread_id() { return static_cast<pid_t>(syscall(SYS_gettid)); }

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
// Any futex wait: FUTEX_WAIT or futex_waitv (ShmChannel's waits on two words).
constexpr long kFutexWait = -2;

inline bool blocked_in(pid_t pid, pid_t tid, long syscall_nr) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/syscall");
  long nr = -1;
  if (!(f >> nr)) return false;  // "running" (no number): not blocked
  return syscall_nr == kFutexWait ? nr == SYS_futex || nr == SYS_futex_waitv : nr == syscall_nr;
}

// Waits, at most `seconds`, until thread `tid` of process `pid` is blocked in `syscall_nr`
// (a futex wait by default); false if it never is.
inline bool wait_blocked_in(pid_t pid, pid_t tid, long syscall_nr = kFutexWait, double seconds = 10) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!blocked_in(pid, tid, syscall_nr)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

}  // namespace hvdrun::test_threads
