// The agent loop's bookkeeping of what other threads report (remote hosts' relays): a
// report made just before a remote marks itself finished is never lost.
#include "launcher/agent.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <string>
#include <utility>
#include <vector>

#include "launcher/output_sink.h"

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
