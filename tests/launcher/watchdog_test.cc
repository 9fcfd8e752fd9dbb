// The watchdog (launcher/watchdog): a real forked watchdog and real process groups. Its
// pipe closes when the Watchdog is destroyed, as when hvdrun dies; the destructor waits
// for the watchdog to exit, so what it did is done when the test looks. (The leaders stay
// our zombies until reaped, so the watchdog waits out its grace: short ones here.)
#include "launcher/watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <gtest/gtest.h>
#include <optional>
#include <thread>

#include "launcher/spawn.h"

namespace hvdrun {
namespace {

// A group of its own running `script` under sh; the leader is our child.
pid_t group_running(const std::string& script) {
  SpawnRequest r;
  r.exe = "/bin/sh";
  r.argv = {"sh", "-c", script};
  auto w = spawn_worker(r);
  EXPECT_TRUE(w.ok()) << w.error().message;
  return w.ok() ? w->pid : -1;
}

// The leader's wait status once it ended, within `seconds`; nullopt if it still runs.
std::optional<int> ended_within(pid_t pid, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int st = 0;
  do {
    if (waitpid(pid, &st, WNOHANG) == pid) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < deadline);
  return std::nullopt;
}

void end_group(pid_t pgid) {
  kill(-pgid, SIGKILL);
  int st;
  waitpid(pgid, &st, 0);
}

TEST(Watchdog, ItsPipeClosingEndsEveryWatchedGroup) {
  pid_t a = group_running("exec sleep 60"), b = group_running("sleep 60; true");
  {
    auto wd = Watchdog::start(0.5);
    ASSERT_TRUE(wd.ok()) << wd.error().message;
    wd->watch(a);
    wd->watch(b);
  }  // hvdrun gone
  auto sa = ended_within(a, 10), sb = ended_within(b, 10);
  ASSERT_TRUE(sa && sb) << "a watched group outlived the watchdog's pipe";
  EXPECT_EQ(exit_code_of(*sa), 128 + SIGTERM);
  EXPECT_EQ(exit_code_of(*sb), 128 + SIGTERM);
}

TEST(Watchdog, AGroupThatIgnoresSigtermGetsSigkillAfterTheGrace) {
  SpawnRequest r;
  r.exe = "/bin/sh";
  r.argv = {"sh", "-c", "trap '' TERM; echo deaf; while :; do sleep 1; done"};
  auto w = spawn_worker(r);
  ASSERT_TRUE(w.ok());
  pid_t a = w->pid;
  char buf[8];
  ASSERT_EQ(read(w->out.get(), buf, 5), 5);  // the trap is set
  {
    auto wd = Watchdog::start(0.2);
    ASSERT_TRUE(wd.ok());
    wd->watch(a);
  }
  auto st = ended_within(a, 10);
  ASSERT_TRUE(st);
  EXPECT_EQ(exit_code_of(*st), 128 + SIGKILL);
}

TEST(Watchdog, AForgottenGroupAndADisarmedWatchdogKillNothing) {
  pid_t forgotten = group_running("exec sleep 60"), watched = group_running("exec sleep 60");
  {
    auto wd = Watchdog::start(0.5);
    ASSERT_TRUE(wd.ok());
    wd->watch(forgotten);
    wd->watch(watched);
    wd->forget(forgotten);  // its id may be another process's by now
  }
  auto w = ended_within(watched, 10);
  ASSERT_TRUE(w);
  EXPECT_EQ(exit_code_of(*w), 128 + SIGTERM);
  EXPECT_FALSE(ended_within(forgotten, 0)) << "the watchdog signalled a group it was told had ended";
  {
    auto wd = Watchdog::start(0.5);
    ASSERT_TRUE(wd.ok());
    wd->watch(forgotten);
    wd->disarm();
  }
  EXPECT_FALSE(ended_within(forgotten, 0)) << "a disarmed watchdog killed";
  end_group(forgotten);
}

// A worker registers itself through the watchdog's pipe before its exec (SpawnRequest::
// register_fd): nothing else tells the watchdog about it.
TEST(Watchdog, AWorkerThatRegisteredItselfIsEnded) {
  pid_t pid = -1;
  {
    auto wd = Watchdog::start(0.5);
    ASSERT_TRUE(wd.ok());
    SpawnRequest r;
    r.exe = "/bin/sh";
    r.argv = {"sh", "-c", "exec sleep 60"};
    r.register_fd = wd->fd();
    auto w = spawn_worker(r);
    ASSERT_TRUE(w.ok()) << w.error().message;
    pid = w->pid;
  }
  auto st = ended_within(pid, 10);
  ASSERT_TRUE(st);
  EXPECT_EQ(exit_code_of(*st), 128 + SIGTERM);
}

TEST(Watchdog, IsDeafToTheSignalsMeantForHvdrun) {
  pid_t a = group_running("exec sleep 60");
  // As in hvdrun, the signals it handles are blocked when it forks the watchdog.
  sigset_t handled, old;
  sigemptyset(&handled);
  for (int s : handled_signals()) sigaddset(&handled, s);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &handled, &old), 0);
  auto wd = Watchdog::start(0.5);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(wd.ok());
  wd->watch(a);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGTSTP}) EXPECT_EQ(kill(wd->pid(), s), 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (getpgid(wd->pid()) != wd->pid() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(getpgid(wd->pid()), wd->pid());  // its own group: a Ctrl-C to hvdrun's does not reach it
  { auto gone = std::move(*wd); }  // had a signal ended it, the group would not be ended now
  auto st = ended_within(a, 10);
  ASSERT_TRUE(st);
  EXPECT_EQ(exit_code_of(*st), 128 + SIGTERM);
}

}  // namespace
}  // namespace hvdrun
