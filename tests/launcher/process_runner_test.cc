// The real ProcessRunner (system_process_runner(), launcher/process_runner.cc) against real
// processes: a worker in its own group and its wait status, the group's signals and
// liveness, the /proc scans (children, stopped groups), the signalfd, and the wait. Every
// blocking step has a deadline (kDeadlineMs); the runner's own wait() is what waits.
#include "launcher/process_runner.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hvdrun {
namespace {

constexpr int kDeadlineMs = 10000;

// The handled signals (SIGCHLD among them) blocked in this thread for the scope, as hvdrun
// blocks them (block_handled_signals), so that the runner's signalfd sees them.
class HandledSignalsBlocked {
 public:
  HandledSignalsBlocked() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : handled_signals()) sigaddset(&set, s);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~HandledSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};

// The test process as hvdrun is: a child subreaper, its handled signals blocked, a signalfd.
struct ProcessRunnerTest : ::testing::Test {
  ProcessRunner& runner = system_process_runner();
  HandledSignalsBlocked blocked;
  UniqueFd signals = runner.open_signals();
  ProcessRunnerTest() { prctl(PR_SET_CHILD_SUBREAPER, 1); }
  ~ProcessRunnerTest() override { prctl(PR_SET_CHILD_SUBREAPER, 0); }

  // Waits (runner.wait on the signalfd) until `done` holds, reading the signals that came;
  // false when the deadline passed first.
  template <class Pred>
  bool wait_until(Pred done, std::vector<std::pair<int, pid_t>>* seen = nullptr) {
    double deadline = runner.now() + kDeadlineMs / 1000.0;
    while (!done()) {
      int left_ms = static_cast<int>((deadline - runner.now()) * 1000);
      if (left_ms <= 0) return false;
      pollfd pf{signals.get(), POLLIN, 0};
      runner.wait(&pf, 1, left_ms);
      for (auto& s : runner.read_signals(signals.get()))
        if (seen) seen->push_back(s);
    }
    return true;
  }
  // The wait status of `pid`, reaped by runner.reap() (other children reaped meanwhile are
  // dropped), or nothing by the deadline.
  std::optional<int> reap(pid_t pid) {
    std::optional<int> status;
    wait_until([&] {
      for (auto [p, st] : runner.reap())
        if (p == pid) status = st;
      return status.has_value();
    });
    return status;
  }
  // One line from `fd` (a worker's stdout), read when runner.wait says it is readable.
  std::string read_line(int fd) {
    std::string line;
    double deadline = runner.now() + kDeadlineMs / 1000.0;
    char c = 0;
    while (line.find('\n') == std::string::npos) {
      int left_ms = static_cast<int>((deadline - runner.now()) * 1000);
      pollfd pf{fd, POLLIN, 0};
      if (left_ms <= 0 || runner.wait(&pf, 1, left_ms) != 1 || ::read(fd, &c, 1) != 1) break;
      line += c;
    }
    return line;
  }
  SpawnedWorker spawn_sh(const std::string& script, int stdin_fd = -1) {
    SpawnRequest req;
    req.exe = "/bin/sh";
    req.argv = {"sh", "-c", script};
    req.env = {"PATH=/usr/bin:/bin"};
    req.stdin_fd = stdin_fd;
    auto w = runner.spawn(req);
    EXPECT_TRUE(w) << (w ? "" : w.error().message);
    return w ? std::move(*w) : SpawnedWorker{};
  }
};

bool has(const std::set<pid_t>& s, pid_t p) { return s.count(p) != 0; }

TEST_F(ProcessRunnerTest, SpawnsAWorkerInItsOwnGroupAndReapsItsWaitStatus) {
  int in[2];
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  SpawnedWorker w = spawn_sh("read x; exit 7", in[0]);
  close(in[0]);
  ASSERT_GT(w.pid, 0);
  EXPECT_EQ(runner.group_of(w.pid), w.pid);
  EXPECT_NE(runner.group_of(w.pid), getpgrp());
  EXPECT_TRUE(runner.group_alive(w.pid));
  EXPECT_TRUE(has(runner.children(), w.pid));
  close(in[1]);  // its read ends: it exits 7
  std::optional<int> st = reap(w.pid);
  ASSERT_TRUE(st) << "not reaped by the deadline";
  EXPECT_TRUE(WIFEXITED(*st));
  EXPECT_EQ(WEXITSTATUS(*st), 7);
  EXPECT_FALSE(runner.group_alive(w.pid));
  EXPECT_FALSE(has(runner.children(), w.pid));
}

// A worker's background child is in its group; killed alone, the worker leaves it to us
// (children() sees the orphan); a signal to the group ends it.
TEST_F(ProcessRunnerTest, SignalsAGroupAndSeesItsOrphanAmongTheChildren) {
  SpawnedWorker w = spawn_sh("sleep 60 & echo $!; wait");
  ASSERT_GT(w.pid, 0);
  pid_t bg = static_cast<pid_t>(std::atoi(read_line(w.out.get()).c_str()));
  ASSERT_GT(bg, 0);
  EXPECT_EQ(runner.group_of(bg), w.pid);
  EXPECT_FALSE(has(runner.children(), bg)) << "a grandchild is not a child";
  runner.signal_process(w.pid, SIGKILL);
  std::optional<int> st = reap(w.pid);
  ASSERT_TRUE(st);
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL);
  EXPECT_TRUE(has(runner.children(), bg)) << "the orphan comes back to the subreaper";
  EXPECT_TRUE(runner.group_alive(w.pid)) << "the orphan is still in the group";
  runner.signal_group(w.pid, SIGTERM);
  st = reap(bg);
  ASSERT_TRUE(st);
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGTERM);
  EXPECT_FALSE(runner.group_alive(w.pid));
}

TEST_F(ProcessRunnerTest, SeesAStoppedGroup) {
  SpawnedWorker w = spawn_sh("exec sleep 60");
  ASSERT_GT(w.pid, 0);
  EXPECT_FALSE(has(runner.stopped_groups(), w.pid));
  runner.signal_group(w.pid, SIGSTOP);
  EXPECT_TRUE(wait_until([&] { return has(runner.stopped_groups(), w.pid); }));
  runner.signal_group(w.pid, SIGKILL);
  runner.signal_group(w.pid, SIGCONT);
  EXPECT_TRUE(reap(w.pid));
  EXPECT_FALSE(has(runner.stopped_groups(), w.pid));
}

// A signal sent to this process turns the signalfd readable; it is read with its sender.
TEST_F(ProcessRunnerTest, ReadsASignalSentHereWithItsSender) {
  ASSERT_GE(signals.get(), 0);
  pid_t sender = fork();
  ASSERT_GE(sender, 0);
  if (sender == 0) {
    kill(getppid(), SIGUSR1);
    _exit(0);
  }
  std::vector<std::pair<int, pid_t>> seen;
  auto got = [&] { return std::count(seen.begin(), seen.end(), std::make_pair(SIGUSR1, sender)) == 1; };
  EXPECT_TRUE(wait_until(got, &seen)) << seen.size() << " signals read, none SIGUSR1 from the sender";
  EXPECT_TRUE(reap(sender));
  EXPECT_FALSE(runner.sent_by_slurm(sender));
}

TEST_F(ProcessRunnerTest, WaitReturnsOnAReadableDescriptor) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  pollfd pf{p[0], POLLIN, 0};
  EXPECT_EQ(runner.wait(&pf, 1, 0), 0) << "nothing written yet";
  ASSERT_EQ(write(p[1], "x", 1), 1);
  pf.revents = 0;
  EXPECT_EQ(runner.wait(&pf, 1, kDeadlineMs), 1);
  EXPECT_TRUE(pf.revents & POLLIN);
  close(p[0]);
  close(p[1]);
}

}  // namespace
}  // namespace hvdrun
