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
#include "pid_holder.h"
#include "recording_sink.h"

namespace hvdrun {
namespace {

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

WorkerLaunch sh_worker(int rank, const std::string& script) {
  WorkerLaunch l;
  l.rank = rank;
  l.host = "b";
  l.request.exe = "/bin/sh";
  l.request.argv = {"sh", "-c", script};
  l.request.env = {"PATH=/usr/bin:/bin"};
  return l;
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
