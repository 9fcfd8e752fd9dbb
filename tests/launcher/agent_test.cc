// The agent loop's bookkeeping of what other threads report (remote hosts' relays): a
// report made just before a remote marks itself finished is never lost.
#include "launcher/agent.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <tuple>
#include <cerrno>
#include <cstring>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "launcher/output_sink.h"
#include "fake_process_runner.h"
#include "pid_holder.h"

namespace hvdrun {
namespace {

class RecordingSink : public OutputSink {
 public:
  void write_lines(int, StreamKind, std::string_view) override {}
  bool congested() const override { return false; }
  void notice(std::string_view line) override { notices.emplace_back(line); }
  void drain() override {}
  std::vector<std::string> notices;
};

// A remote whose relay has already ended: the loop sees it finished on its first look.
class FinishedRemote : public RemoteControl {
 public:
  void signal(int) override {}
  bool finished() const override { return true; }
};

// The relay asks for the teardown, then marks itself finished; the loop may look at the
// mark before the wake-up: the teardown must still be taken (it once ended the job with
// exit 0 and no word, found by CI on Hardening.StoppedLauncherSaysItLostContactAndExits5).
TEST(LocalAgent, TeardownAskedJustBeforeTheRemoteFinishedIsTaken) {
  RecordingSink sink;
  LocalAgent agent(AgentOptions{}, sink, nullptr);
  FinishedRemote remote;
  agent.set_remotes({&remote});
  agent.request_teardown("hvdrun: lost contact with the agent on b", 5);
  AgentResult r = agent.run({});
  EXPECT_EQ(r.exit_code, 5);
  ASSERT_EQ(sink.notices.size(), 1u);
  EXPECT_EQ(sink.notices[0], "hvdrun: lost contact with the agent on b");
}

TEST(LocalAgent, RemoteFailureReportedJustBeforeTheRemoteFinishedIsReported) {
  RecordingSink sink;
  LocalAgent agent(AgentOptions{}, sink, nullptr);
  FinishedRemote remote;
  std::vector<std::string> hosts{"a", "b"};
  agent.set_rank_hosts(&hosts);
  agent.set_remotes({&remote});
  agent.remote_failure(1, "b", 3 << 8);  // rank 1 exited with code 3
  AgentResult r = agent.run({});
  EXPECT_EQ(r.exit_code, 3);
  ASSERT_EQ(sink.notices.size(), 1u);
  EXPECT_EQ(sink.notices[0], "hvdrun: rank 1 (host b) exited with code 3");
}

// A remote host whose relay ends when the test says so.
class LaterRemote : public RemoteControl {
 public:
  void signal(int sig) override {
    if (on_signal) on_signal(sig);
  }
  std::function<void(int)> on_signal;
  bool finished() const override { return done.load(); }
  std::atomic<bool> done{false};
};

// hvdrun's agent for ranks 0, 1, 2 on hosts a, b, c, all remote: one relay, ended by the
// test; its processes and clock are fake (virtual time: no sleeps order the reports).
struct ThreeRemoteRanks {
  RecordingSink sink;
  FakeProcessRunner runner;
  LocalAgent agent{AgentOptions{}, sink, nullptr, &runner};
  LaterRemote remote;
  std::vector<std::string> hosts{"a", "b", "c"};
  ThreeRemoteRanks() {
    agent.set_rank_hosts(&hosts);
    agent.set_remotes({&remote});
  }
  // The relay ends: the agent's loop sees every host finished.
  void relay_ends() {
    remote.done = true;
    agent.wake();
  }
};

// Rank 2 (host c) exits 0 mid-collective; rank 0 (host a) fails on its closed connection
// and says so (the lost-peer report), and host a's report of that failure reaches hvdrun
// first; host c's (rank 2 left, exited 0) comes 300 ms later, past the 100 ms in which
// failures are weighed together. Rank 2 is the one named, with exit 6 (chaos found rank 0
// named, exit 3, when the hosts' reports came in this order).
TEST(LocalAgent, ALostPeerThatExitedZeroIsBlamedWhicheverHostReportsFirst) {
  ThreeRemoteRanks job;
  job.agent.rank_lost_peer(0, 2);
  job.agent.remote_failure(0, "a", 3 << 8);
  job.runner.at(0.3, [&] {
    job.agent.rank_left(2);
    job.agent.remote_exited_0(2);
  });
  job.runner.at(0.35, [&] { job.relay_ends(); });
  AgentResult r = job.agent.run({});
  EXPECT_EQ(r.exit_code, 6);
  const auto& notices = job.sink.notices;
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].rfind("hvdrun: rank 2 (host c) exited with code 0 while the other ranks still waited on it", 0),
            0u)
      << notices[0];
}

// The lost peer's own end is never heard of (its host's relay ended first): once nothing
// more can come, the failure that was seen is the job's.
TEST(LocalAgent, ALostPeerNeverHeardOfLeavesTheFailureSeen) {
  ThreeRemoteRanks job;
  job.agent.rank_lost_peer(0, 2);
  job.agent.remote_failure(0, "a", 3 << 8);
  job.runner.at(0.3, [&] { job.relay_ends(); });
  AgentResult r = job.agent.run({});
  EXPECT_EQ(r.exit_code, 3);
  ASSERT_EQ(job.sink.notices.size(), 1u);
  EXPECT_EQ(job.sink.notices[0], "hvdrun: rank 0 (host a) exited with code 3");
}

// The lost peer's end never comes while its host's relay still runs: the verdict waits
// kLostPeerWait (2 s) after the first failure for it, and no longer.
TEST(LocalAgent, ALostPeerIsWaitedForTwoSecondsAtMost) {
  ThreeRemoteRanks job;
  job.agent.rank_lost_peer(0, 2);
  job.agent.remote_failure(0, "a", 3 << 8);
  std::vector<double> teardown_at;
  job.remote.on_signal = [&](int sig) {
    if (sig == SIGTERM) teardown_at.push_back(job.runner.now());
    job.relay_ends();
  };
  AgentResult r = job.agent.run({});
  EXPECT_EQ(r.exit_code, 3);
  ASSERT_EQ(teardown_at.size(), 1u);
  EXPECT_GE(teardown_at[0], 2.0);
  EXPECT_LT(teardown_at[0], 2.1);
}

// A sink whose last write fails while the agent drains it at the end (hvdrun's reader left
// once the workers had ended, before their output was written): the failure asks for a
// teardown from the writer's thread, after the loop has ended.
class FailingDrainSink : public RecordingSink {
 public:
  LocalAgent* agent = nullptr;
  std::string message;
  int code = 0;
  void drain() override {
    if (agent && code) agent->request_teardown(std::exchange(message, ""), std::exchange(code, 0));
  }
};

TEST(LocalAgent, OutputFailureWhileTheLastOutputDrainsIsNotLost) {
  FailingDrainSink sink;
  LocalAgent agent(AgentOptions{}, sink, nullptr);
  sink.agent = &agent;
  sink.code = 141;  // the reader is gone: SIGPIPE's status, without a word
  FinishedRemote remote;
  agent.set_remotes({&remote});
  AgentResult r = agent.run({});
  EXPECT_EQ(r.exit_code, 141);
  EXPECT_TRUE(sink.notices.empty());

  FailingDrainSink full;
  LocalAgent agent2(AgentOptions{}, full, nullptr);
  full.agent = &agent2;
  full.code = 7;
  full.message = "hvdrun: --output-filename: cannot write d/rank.0/stdout: No space left on device";
  agent2.set_remotes({&remote});
  r = agent2.run({});
  EXPECT_EQ(r.exit_code, 7);
  ASSERT_EQ(full.notices.size(), 1u);
  EXPECT_EQ(full.notices[0], "hvdrun: --output-filename: cannot write d/rank.0/stdout: No space left on device");
}

// SIGCHLD blocked for the scope, as hvdrun blocks it (block_handled_signals), so that the
// agent loop's signalfd sees its workers end.
class SigchldBlocked {
 public:
  SigchldBlocked() {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &chld, &old_);
  }
  ~SigchldBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};

// A worker for the fake runner (which starts nothing) on host b.
WorkerLaunch fake_worker(int rank) {
  WorkerLaunch l;
  l.rank = rank;
  l.host = "b";
  l.request.exe = "/nonexistent";
  l.request.argv = {"fake"};
  return l;
}

WorkerLaunch sh_worker(int rank, const std::string& script) {
  WorkerLaunch l;
  l.rank = rank;
  l.host = "b";
  l.request.exe = "/bin/sh";
  l.request.argv = {"sh", "-c", script};
  l.request.env = {"PATH=/usr/bin:/bin"};
  return l;
}

// Agent mode: a rank failed here, so this agent has begun the teardown itself (SIGTERM, the
// grace); then the launcher's teardown SIGTERM arrives. That is not a second interrupt (the
// launcher relays SIGKILL for one): the ranks here keep their grace. It SIGKILLed them at
// once, cutting short their SIGTERM handlers, on the very host where the failure was.
TEST(LocalAgent, LaunchersTeardownDuringTheAgentsOwnKeepsTheGrace) {
  RecordingSink sink;
  FakeProcessRunner runner;
  runner.behaviours = {{.term_delay = 0.5, .term_status = 0},  // rank 0 cleans up, then exits 0
                       {.exit_at = 0.3, .exit_status = 3 << 8}};
  AgentOptions ao;
  ao.kill_grace = 5;
  ao.on_failure = [](int, const std::string&, int) {};
  LocalAgent agent(ao, sink, nullptr, &runner);
  runner.at(0.6, [&agent] { agent.request_signal(SIGTERM); });  // the agent's teardown has begun
  AgentResult r = agent.run({fake_worker(0), fake_worker(1)});
  EXPECT_EQ(r.exit_code, 3);
  for (const auto& s : runner.sent) EXPECT_NE(s.sig, SIGKILL) << "at " << s.at << ": rank 0 was killed in its grace";
}

// A local teardown: SIGCONT and SIGTERM to every group at once, SIGKILL to those left when
// the grace is over, and nothing after; ranks that die together are weighed together (a
// signal death first).
TEST(LocalAgent, TeardownSignalsThenKillsAfterTheGrace) {
  RecordingSink sink;
  FakeProcessRunner runner;
  runner.behaviours = {{.exit_at = 0.05, .exit_status = SIGSEGV},  // rank 0 crashes a moment later
                       {.exit_at = 0.0, .exit_status = 1 << 8},    // rank 1 fails on its connection
                       {.term_delay = -1}};                        // rank 2 ignores SIGTERM
  AgentOptions ao;
  ao.kill_grace = 5;
  LocalAgent agent(ao, sink, nullptr, &runner);
  AgentResult r = agent.run({fake_worker(0), fake_worker(1), fake_worker(2)});
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV);
  ASSERT_EQ(sink.notices.size(), 1u);
  EXPECT_EQ(sink.notices[0], "hvdrun: rank 0 (host b) was killed by signal 11 (SIGSEGV)");
  std::vector<std::tuple<pid_t, int>> to_rank2;
  double term_at = -1, kill_at = -1;
  for (const auto& s : runner.sent)
    if (s.target == 1002) {
      to_rank2.emplace_back(s.target, s.sig);
      if (s.sig == SIGTERM) term_at = s.at;
      if (s.sig == SIGKILL) kill_at = s.at;
    }
  EXPECT_EQ(to_rank2, (std::vector<std::tuple<pid_t, int>>{{1002, SIGCONT}, {1002, SIGTERM}, {1002, SIGKILL}}));
  EXPECT_NEAR(kill_at - term_at, 5.0, 0.01);
}

// Slurm's SIGTERM reported by an agent while a teardown is under way (a rank killed by that
// same SIGTERM began it) is said once, and is no second interrupt: no SIGKILL in the grace.
TEST(LocalAgent, SlurmSignalDuringATeardownIsSaidOnceAndKeepsTheGrace) {
  RecordingSink sink;
  FakeProcessRunner runner;
  runner.behaviours = {{.exit_at = 0.0, .exit_status = SIGTERM}, {.term_delay = 1.0, .term_status = 0}};
  LocalAgent agent(AgentOptions{}, sink, nullptr, &runner);
  runner.at(0.2, [&agent] {
    agent.slurm_signal(SIGTERM);
    agent.slurm_signal(SIGTERM);  // another host's agent
  });
  AgentResult r = agent.run({fake_worker(0), fake_worker(1)});
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  ASSERT_EQ(sink.notices.size(), 2u);
  EXPECT_EQ(sink.notices[0], "hvdrun: rank 0 (host b) was killed by signal 15 (SIGTERM)");
  EXPECT_EQ(sink.notices[1],
            "hvdrun: received SIGTERM from Slurm (the job was cancelled or reached its time limit), terminating the job");
  for (const auto& s : runner.sent) EXPECT_NE(s.sig, SIGKILL);
}

// What other threads ask is taken in the order they asked (one queue): a teardown asked
// before the launcher's SIGTERM is the job's end; the signals went first, whatever the order.
TEST(LocalAgent, RequestsAreTakenInTheOrderAsked) {
  RecordingSink sink;
  FakeProcessRunner runner;
  LocalAgent agent(AgentOptions{}, sink, nullptr, &runner);
  agent.request_teardown("hvdrun: --output-filename: cannot write", 7);
  agent.request_signal(SIGTERM);
  AgentResult r = agent.run({fake_worker(0)});
  EXPECT_EQ(r.exit_code, 7);
  ASSERT_EQ(sink.notices.size(), 1u);
  EXPECT_EQ(sink.notices[0], "hvdrun: --output-filename: cannot write");
}

// hvdrun's own SIGTERM: from Slurm's step daemon it is said as Slurm's (the job was
// cancelled or timed out); from anyone else it is an interrupt.
TEST(LocalAgent, SigtermFromSlurmIsSaidAsSlurms) {
  for (pid_t sender : {FakeProcessRunner::kSlurmStepd, pid_t{1}}) {
    RecordingSink sink;
    FakeProcessRunner runner;
    runner.behaviours = {{.term_delay = 0.1}};
    LocalAgent agent(AgentOptions{}, sink, nullptr, &runner);
    runner.at(0.5, [&runner, sender] { runner.deliver(SIGTERM, sender); });
    AgentResult r = agent.run({fake_worker(0)});
    EXPECT_EQ(r.exit_code, 128 + SIGTERM);
    ASSERT_EQ(sink.notices.size(), 1u);
    EXPECT_EQ(sink.notices[0], sender == FakeProcessRunner::kSlurmStepd
                                   ? "hvdrun: received SIGTERM from Slurm (the job was cancelled or reached its time "
                                     "limit), terminating the job"
                                   : "hvdrun: received SIGTERM, terminating the job");
  }
}

// Ctrl-Z: the workers' groups are stopped with SIGSTOP (SIGTSTP is dropped to a group the
// kernel deems orphaned), then hvdrun stops itself; fg's SIGCONT resumes the workers.
TEST(LocalAgent, CtrlZStopsTheWorkersThenHvdrun) {
  RecordingSink sink;
  FakeProcessRunner runner;
  runner.behaviours = {{.exit_at = 3.0, .exit_status = 0}};
  LocalAgent agent(AgentOptions{}, sink, nullptr, &runner);
  int stopped_before_self = -1;
  runner.at(1.0, [&runner] { runner.deliver(SIGTSTP); });
  runner.at(2.0, [&] {
    stopped_before_self = runner.stopped_self;
    runner.deliver(SIGCONT);
  });
  AgentResult r = agent.run({fake_worker(0)});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(stopped_before_self, 1);
  std::vector<std::tuple<pid_t, int>> sent;
  for (const auto& s : runner.sent) sent.emplace_back(s.target, s.sig);
  EXPECT_EQ(sent, (std::vector<std::tuple<pid_t, int>>{{1000, SIGSTOP}, {1000, SIGCONT}}));
  EXPECT_TRUE(sink.notices.empty());
}

// A second Ctrl-C ends the grace at once: SIGKILL then, not when the grace is over.
TEST(LocalAgent, SecondCtrlCKillsAtOnce) {
  RecordingSink sink;
  FakeProcessRunner runner;
  runner.behaviours = {{.term_delay = -1}};
  AgentOptions ao;
  ao.kill_grace = 30;
  LocalAgent agent(ao, sink, nullptr, &runner);
  runner.at(1.0, [&runner] { runner.deliver(SIGINT); });
  runner.at(1.5, [&runner] { runner.deliver(SIGINT); });
  AgentResult r = agent.run({fake_worker(0)});
  EXPECT_EQ(r.exit_code, 128 + SIGINT);
  ASSERT_EQ(sink.notices.size(), 1u);
  EXPECT_EQ(sink.notices[0], "hvdrun: received SIGINT, terminating the job");
  ASSERT_FALSE(runner.sent.empty());
  EXPECT_EQ(runner.sent.back().sig, SIGKILL);
  EXPECT_DOUBLE_EQ(runner.sent.back().at, 1.5);
}

// A second interrupt relayed by the launcher (SIGKILL) ends the grace at once.
TEST(LocalAgent, SecondInterruptKillsAtOnce) {
  RecordingSink sink;
  FakeProcessRunner runner;
  runner.behaviours = {{.term_delay = -1}};
  AgentOptions ao;
  ao.kill_grace = 30;
  LocalAgent agent(ao, sink, nullptr, &runner);
  runner.at(1.0, [&agent] { agent.request_signal(SIGINT); });
  runner.at(2.0, [&agent] { agent.request_signal(SIGKILL); });
  AgentResult r = agent.run({fake_worker(0)});
  EXPECT_EQ(r.exit_code, 128 + SIGINT);
  ASSERT_FALSE(runner.sent.empty());
  EXPECT_EQ(runner.sent.back().sig, SIGKILL);
  EXPECT_DOUBLE_EQ(runner.sent.back().at, 2.0);
}

// A process that is not ours (nor our child's: the agent ends those it adopts) takes
// `pid` (clone3 with set_tid) and leads a process group of that id; its parent, orphaned
// at once, writes its wait status to `status_fd` when it ends. False: not possible here.
bool give_pid_to_a_stranger(pid_t pid, int status_fd, std::string* why) {
  int rep[2];
  if (pipe(rep) != 0) return false;
  pid_t helper = fork();
  if (helper == 0) {
    if (fork() != 0) _exit(0);
    long other = clone_holding_pid(pid);
    int e = other < 0 ? errno : 0;
    if (write(rep[1], &e, sizeof e) < 0 || other < 0) _exit(1);
    int st = 0;
    waitpid(static_cast<pid_t>(other), &st, 0);
    if (write(status_fd, &st, sizeof st) < 0) _exit(1);
    _exit(0);
  }
  close(rep[1]);
  int e = -1;
  if (read(rep[0], &e, sizeof e) != static_cast<ssize_t>(sizeof e)) e = EIO;
  close(rep[0]);
  int st;
  waitpid(helper, &st, 0);  // (or the agent's loop reaped it)
  if (e != 0) *why = std::strerror(e);
  return e == 0;
}

// A rank that ended at once freed its pid; hvdrun looked at its group again at the end of
// the job (and at a teardown), and signalled whatever process group had that id by then.
TEST(LocalAgent, TheGroupIdOfARankThatEndedEarlyIsNotSignalledLater) {
  char tmpl[] = "/tmp/agent_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string pidfile = std::string(tmpl) + "/pid";
  RecordingSink sink;
  AgentOptions ao;
  ao.kill_grace = 1;
  LocalAgent agent(ao, sink, nullptr);
  SigchldBlocked blocked;
  std::vector<WorkerLaunch> launches;
  launches.push_back(sh_worker(0, "sleep 1.5"));
  launches.push_back(sh_worker(1, "echo $$ > " + pidfile + ".tmp; mv " + pidfile + ".tmp " + pidfile));
  int status_pipe[2];
  ASSERT_EQ(pipe(status_pipe), 0);
  pid_t taken = -1;
  std::string why;
  std::thread stranger([&] {
    for (int i = 0; i < 500 && access(pidfile.c_str(), F_OK) != 0; ++i) usleep(2000);
    FILE* f = std::fopen(pidfile.c_str(), "r");
    if (!f) return;
    int p = 0;
    if (std::fscanf(f, "%d", &p) != 1) p = 0;
    std::fclose(f);
    // Once rank 1 is reaped, its pid goes to a stranger's new process group.
    for (int i = 0; i < 500 && p > 0 && access(("/proc/" + std::to_string(p)).c_str(), F_OK) == 0; ++i) usleep(2000);
    if (p > 0 && give_pid_to_a_stranger(p, status_pipe[1], &why)) taken = p;
  });
  AgentResult r = agent.run(std::move(launches));
  stranger.join();
  EXPECT_EQ(r.exit_code, 0);
  if (taken > 0) {
    pollfd pf{status_pipe[0], POLLIN, 0};
    bool ended = poll(&pf, 1, 200) == 1;
    EXPECT_FALSE(ended) << "the process group that took the early rank's pid was signalled";
    kill(taken, SIGKILL);
  }
  close(status_pipe[0]);
  close(status_pipe[1]);
  std::remove(pidfile.c_str());
  rmdir(tmpl);
  if (taken <= 0) GTEST_SKIP() << "cannot give a pid to another process here: " << why;
}

// The watchdog forgets a group once it has ended: hvdrun killed later in the job (SIGKILL,
// the OOM killer) left the watchdog to end the job's groups, and it signalled every group it
// had ever been told of, that of a rank that had ended long before too, whoever's it was by
// then. Here hvdrun's part runs in a child, SIGKILLed once the early rank's pid is a
// stranger's group.
TEST(LocalAgent, WatchdogDoesNotSignalTheGroupIdOfARankThatEndedEarly) {
  char tmpl[] = "/tmp/agent_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl, early = dir + "/early", late = dir + "/late";
  pid_t hvdrun = fork();
  ASSERT_GE(hvdrun, 0);
  if (hvdrun == 0) {
    block_handled_signals();
    auto watchdog = Watchdog::start(/*grace_seconds=*/1);
    if (!watchdog) _exit(3);
    RecordingSink sink;
    AgentOptions ao;
    ao.kill_grace = 1;
    LocalAgent agent(ao, sink, &*watchdog);
    std::vector<WorkerLaunch> launches;
    launches.push_back(sh_worker(0, "echo $$ > " + late + ".tmp; mv " + late + ".tmp " + late + "; exec sleep 30"));
    launches.push_back(sh_worker(1, "echo $$ > " + early + ".tmp; mv " + early + ".tmp " + early));
    agent.run(std::move(launches));
    _exit(0);
  }
  auto read_pid = [](const std::string& path) {
    for (int i = 0; i < 2500 && access(path.c_str(), F_OK) != 0; ++i) usleep(2000);
    int p = 0;
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      if (std::fscanf(f, "%d", &p) != 1) p = 0;
      std::fclose(f);
    }
    return static_cast<pid_t>(p);
  };
  pid_t early_pid = read_pid(early), late_pid = read_pid(late);
  auto alive = [](pid_t p) {  // a zombie (reaped by nobody yet) has ended
    char path[64], buf[512] = {};
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(p));
    FILE* f = std::fopen(path, "r");
    if (!f) return false;
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    const char* rp = std::strrchr(buf, ')');
    return !(n > 0 && rp && rp[1] == ' ' && rp[2] == 'Z');
  };
  auto gone = [&alive](pid_t p, int ms) {
    for (int i = 0; i < ms / 2 && alive(p); ++i) usleep(2000);
    return !alive(p);
  };
  int status_pipe[2];
  ASSERT_EQ(pipe(status_pipe), 0);
  pid_t taken = -1;
  std::string why;
  if (early_pid > 0 && gone(early_pid, 5000)) {
    usleep(200000);  // hvdrun's loop has seen the group end (it looks at once, at the reap)
    if (give_pid_to_a_stranger(early_pid, status_pipe[1], &why)) taken = early_pid;
  }
  kill(hvdrun, SIGKILL);  // the watchdog takes over: it ends the job's groups
  int st;
  waitpid(hvdrun, &st, 0);
  EXPECT_GT(late_pid, 0);
  if (late_pid > 0) {
    EXPECT_TRUE(gone(late_pid, 5000)) << "the watchdog did not end the running rank";
  }
  if (taken > 0) {
    pollfd pf{status_pipe[0], POLLIN, 0};
    bool ended = poll(&pf, 1, 1500) == 1;
    EXPECT_FALSE(ended) << "the watchdog signalled the process group that took the early rank's pid";
    kill(taken, SIGKILL);
  }
  close(status_pipe[0]);
  close(status_pipe[1]);
  std::remove(early.c_str());
  std::remove(late.c_str());
  rmdir(tmpl);
  if (early_pid <= 0) FAIL() << "rank 1 never wrote its pid";
  if (taken <= 0) GTEST_SKIP() << "cannot give a pid to another process here: " << why;
}

TEST(LocalAgent, NothingReportedAndEveryRemoteFinishedIsSuccess) {
  RecordingSink sink;
  LocalAgent agent(AgentOptions{}, sink, nullptr);
  FinishedRemote remote;
  agent.set_remotes({&remote});
  AgentResult r = agent.run({});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(sink.notices.empty());
}

}  // namespace
}  // namespace hvdrun
