// LocalAgent's decisions (launcher/agent_policy.cc) on a fake ProcessRunner, in virtual
// time: whom a failure or a lost peer blames, the teardown's signals and grace, and what a
// signal to hvdrun (or relayed to an agent) does.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "fake_process_runner.h"
#include "launcher/agent.h"
#include "recording_sink.h"

namespace hvdrun {
namespace {

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

// A worker for the fake runner (which starts nothing) on host b.
WorkerLaunch fake_worker(int rank) {
  WorkerLaunch l;
  l.rank = rank;
  l.host = "b";
  l.request.exe = "/nonexistent";
  l.request.argv = {"fake"};
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
}  // namespace
}  // namespace hvdrun
