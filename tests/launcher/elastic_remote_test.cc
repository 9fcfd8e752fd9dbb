// hvdrun's side of an elastic job's remote host (launcher/elastic_remote.cc) with a real
// agent (this build's `hvdrun --agent`, started as a command, standing for another host):
// a remote worker's output comes through the driver's pipes, its end is reaped with its
// status, a signal to it reaches its group, the link's state is its liveness.
#include "launcher/elastic_remote.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "common/deadline.h"
#include "common/socket_io.h"
#include "elastic_sh_job.h"
#include "recording_sink.h"

namespace hvdrun {
namespace {

struct CommandStarter : AgentStarter {
  Result<std::unique_ptr<HostLink>> open(const std::string& host, std::chrono::steady_clock::time_point) override {
    return open_command_link({HVDRUN_BIN, "--agent", "--start-timeout=20"}, host);
  }
};

// Everything on `fd` until its EOF (20 s at most).
std::string read_to_eof(int fd) {
  std::string s;
  auto deadline = deadline_in(20);
  while (ms_until(deadline) > 0) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, ms_until(deadline)) <= 0) break;
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
  }
  return s;
}

// The wait status `agents` reaps for `id` (-1: none within 20 s).
int reaped(ElasticAgents& agents, pid_t id) {
  auto deadline = deadline_in(20);
  while (ms_until(deadline) > 0) {
    for (auto [pid, st] : agents.reap())
      if (pid == id) return st;
    agents.wait(nullptr, 0, 100);
  }
  return -1;
}

TEST(ElasticAgents, ARemoteWorkerRunsThroughItsHostsAgent) {
  CommandStarter starter;
  RemoteSettings rs;
  rs.start_timeout = 20;
  auto host = std::make_unique<RemoteHost>("node-x", rs, starter);
  ASSERT_TRUE(host->connect(deadline_in(20)));
  AgentJob job = elastic_sh_job("node-x", {"HVDRUN_ELASTIC_SLOT=node-x:0"});
  const std::vector<std::string> env = job.ranks[0].env;
  ASSERT_TRUE(host->prepare(job));
  RecordingSink sink;
  auto wake = WakePipe::open();
  ASSERT_TRUE(wake) << wake.error().message;
  ElasticAgents agents(nullptr, sink, 30, std::move(*wake));
  agents.add(std::move(host));
  EXPECT_TRUE(agents.remote("node-x"));
  EXPECT_FALSE(agents.remote("localhost"));

  SpawnRequest req;
  req.host = "node-x";  // through its agent
  req.argv = {"sh", "-c", "echo out; echo err >&2; exit 5"};
  req.env = env;
  auto w = agents.spawn(req);
  ASSERT_TRUE(w);
  EXPECT_GE(w->pid, ElasticAgents::kFirstRemoteId);
  EXPECT_EQ(read_to_eof(w->out.get()), "out\n");
  EXPECT_EQ(read_to_eof(w->err.get()), "err\n");
  EXPECT_EQ(reaped(agents, w->pid), 5 << 8);
  EXPECT_FALSE(agents.group_alive(w->pid));
  EXPECT_EQ(agents.remote_workers(), 0u);  // an ended worker is forgotten

  req.argv = {"sh", "-c", "trap 'echo term; exit 0' TERM; echo up; while :; do sleep 0.05; done"};
  auto v = agents.spawn(req);
  ASSERT_TRUE(v);
  char up[3] = {};
  pollfd p{v->out.get(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 20000), 1);
  ASSERT_EQ(read(v->out.get(), up, 3), 3);  // "up\n": its trap is set
  EXPECT_TRUE(agents.group_alive(v->pid));
  agents.signal_group(v->pid, SIGTERM);  // kKill to its group
  EXPECT_EQ(read_to_eof(v->out.get()), "term\n");
  EXPECT_EQ(reaped(agents, v->pid), 0);
  EXPECT_EQ(agents.remote_workers(), 0u);

  req.argv = {"sh", "-c", "echo up; while :; do sleep 0.05; done"};
  auto u = agents.spawn(req);
  ASSERT_TRUE(u);
  p = {u->out.get(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 20000), 1);
  ASSERT_EQ(read(u->out.get(), up, 3), 3);
  EXPECT_EQ(agents.remote_workers(), 1u);
  auto l = agents.liveness("node-x");
  EXPECT_FALSE(l.dropped);
  EXPECT_LE(agents.now() - l.heard, 30);
  agents.close("node-x");
  EXPECT_EQ(agents.remote_workers(), 0u);  // the lost host's worker forgotten, its pipes closed
  p = {u->out.get(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 0), 1);
  EXPECT_EQ(read(u->out.get(), up, 3), 0);
  EXPECT_TRUE(agents.liveness("node-x").dropped);  // no agent any more
  EXPECT_TRUE(sink.notices.empty()) << sink.notices.front();
}

// Each host's agent command: `node-y` a real agent, `gone` a command that exits at once,
// `hung` one that never speaks (an unreachable host held up to --start-timeout).
struct HostsStarter : AgentStarter {
  Result<std::unique_ptr<HostLink>> open(const std::string& host, std::chrono::steady_clock::time_point) override {
    if (host == "gone") return open_command_link({"sh", "-c", "echo no such host >&2; exit 3"}, host);
    if (host == "hung") return open_command_link({"sleep", "60"}, host);
    return open_command_link({HVDRUN_BIN, "--agent", "--start-timeout=20"}, host);
  }
};

// A new host's agent starts on a thread of its own: open() returns at once (a start under
// way is not begun twice), the driver's wait wakes when a start ends and opened() tells
// each once (its error naming the host); the job's end (close_all) aborts the start still
// under way, joins its thread and ends what it had started: no process is left.
TEST(ElasticAgents, ANewHostsAgentStartsInTheBackgroundAndTheJobsEndAbortsOneUnderWay) {
  HostsStarter starter;
  RemoteSettings rs;
  rs.start_timeout = 20;
  std::mutex mu;
  std::map<std::string, int> calls;
  std::map<std::string, std::string> errors;  // host -> its start's error, once it returned
  auto opener = [&](const std::string& host, const std::atomic<bool>& abort) -> Result<std::unique_ptr<RemoteHost>> {
    {
      std::lock_guard<std::mutex> lk(mu);
      ++calls[host];
    }
    auto r = std::make_unique<RemoteHost>(host, rs, starter);
    r->abort_when(&abort);
    Status st = r->connect(deadline_in(rs.start_timeout));
    if (st) st = r->prepare(elastic_sh_job(host, {"HVDRUN_ELASTIC_SLOT=" + host + ":0"}));
    std::lock_guard<std::mutex> lk(mu);
    errors[host] = st ? "" : st.error().message;
    if (!st) return st.error();
    r->abort_when(nullptr);  // (`abort` ends with its opening)
    return r;
  };
  RecordingSink sink;
  auto wake = WakePipe::open();
  ASSERT_TRUE(wake) << wake.error().message;
  ElasticAgents agents(opener, sink, 30, std::move(*wake));
  for (const char* h : {"hung", "gone", "node-y"}) EXPECT_TRUE(agents.open(h)) << h;
  std::map<std::string, std::string> told;  // host -> "" or its error
  auto deadline = deadline_in(20);
  while (told.size() < 2 && ms_until(deadline) > 0) {
    agents.wait(nullptr, 0, ms_until(deadline));  // woken by a start's end
    for (auto& o : agents.opened()) EXPECT_TRUE(told.emplace(o.host, o.status ? "" : o.status.error().message).second);
  }
  ASSERT_EQ(told.size(), 2u);
  EXPECT_EQ(told["node-y"], "");
  EXPECT_NE(told["gone"].find("gone"), std::string::npos) << told["gone"];
  EXPECT_FALSE(agents.open("node-y"));  // its agent runs
  EXPECT_FALSE(agents.liveness("node-y").dropped);
  EXPECT_TRUE(agents.open("hung"));  // still under way: not begun again
  EXPECT_TRUE(agents.opened().empty());
  agents.close_all();
  {
    std::lock_guard<std::mutex> lk(mu);
    EXPECT_EQ(calls, (std::map<std::string, int>{{"gone", 1}, {"hung", 1}, {"node-y", 1}}));
    EXPECT_EQ(errors["hung"], "host hung: the job ended while its agent started");  // not its time-out
  }
  EXPECT_TRUE(agents.opened().empty());
  EXPECT_TRUE(agents.liveness("node-y").dropped);
  int st;
  EXPECT_EQ(waitpid(-1, &st, WNOHANG), -1);  // every client reaped: `sleep 60` and node-y's agent
  EXPECT_EQ(errno, ECHILD);
}

}  // namespace
}  // namespace hvdrun
