// `hvdrun --agent`'s main (run_agent_mode), run in a child process of the test that speaks
// the launcher's side of the protocol over pipes on the child's stdin and stdout.
#include "launcher/remote_agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sys/stat.h>
#include <optional>
#include <string>
#include <thread>

#include "common/deadline.h"
#include "common/socket_io.h"
#include "launcher/agent.h"
#include "launcher/agent_messages.h"
#include "launcher/agent_wire.h"

#include <nlohmann/json.hpp>

#include "elastic_sh_job.h"

namespace hvdrun {
namespace {

using agentwire::Type;

int threads_of_self() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

// The next frame on `fd` within `seconds` (nullopt at EOF or the deadline).
std::optional<agentwire::Frame> next_frame(int fd, agentwire::FrameReader& reader, double seconds) {
  auto deadline = deadline_in(seconds);
  char buf[4096];
  while (true) {
    if (auto f = reader.next()) return f;
    int ms = ms_until(deadline);
    if (ms <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    int n = poll(&p, 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;
    if (!reader.feed(std::string_view(buf, static_cast<size_t>(r)))) return std::nullopt;
  }
}

// An agent process (`hvdrun` in agent mode) on two pipes: its stdin (`in`) and stdout (`out`).
struct AgentProcess {
  pid_t child = -1;
  int in = -1, out = -1;
};

AgentProcess fork_agent() {
  int to_agent[2], from_agent[2];
  if (pipe2(to_agent, O_CLOEXEC) != 0) return {};
  if (pipe2(from_agent, O_CLOEXEC) != 0) {
    close(to_agent[0]);
    close(to_agent[1]);
    return {};
  }
  pid_t child = fork();
  if (child == 0) {
    block_handled_signals();  // as hvdrun's main does before anything else
    dup2(to_agent[0], 0);
    dup2(from_agent[1], 1);
    close(to_agent[1]);  // (the test's ends: held here, they would hide the test's EOF)
    close(from_agent[0]);
    _exit(run_agent_mode({"--start-timeout=20"}));
  }
  close(to_agent[0]);
  close(from_agent[1]);
  return {child, to_agent[1], from_agent[0]};
}

// Closes the agent's pipes and waits up to 5 s for it to exit (then kills it): the pid
// waitpid returned (the child's when it exited in time).
pid_t reap_agent(AgentProcess& a) {
  close(a.in);
  close(a.out);
  int st = 0;
  pid_t r = 0;
  for (int i = 0; i < 500 && (r = waitpid(a.child, &st, WNOHANG)) == 0; ++i) usleep(10000);
  if (r == 0) {
    kill(a.child, SIGKILL);
    waitpid(a.child, &st, 0);
  }
  return r;
}

// An agent whose job has ended (kDone sent) while hvdrun keeps the link open: when its
// main returns, nothing else of it runs. Its control and heartbeat threads used to stay,
// detached, with references into the returned frame (the LocalAgent, the link, the frame
// reader): hvdrun's EOF right after kDone, or the next heartbeat, then wrote into whatever
// the exiting process had put there (ASan, detect_stack_use_after_return: 8 of 10 agents of
// Cluster.RemoteWorkerKilledTearsDownTheJobWithItsRankAndHost; CI once saw such an agent
// still alive 10 s after hvdrun had ended).
TEST(RemoteAgent, NothingOfTheAgentRunsOnceItsMainReturns) {
  int to_agent[2], from_agent[2], report[2];
  ASSERT_EQ(pipe2(to_agent, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(from_agent, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // As hvdrun's main does before anything else; then the agent's stdin and stdout.
    block_handled_signals();
    dup2(to_agent[0], 0);
    dup2(from_agent[1], 1);
    // The threads this process has before the agent runs: 1, or 2 under TSan (its runtime
    // starts its own thread again in a forked child).
    const int before = threads_of_self();
    int code = run_agent_mode({"--start-timeout=20"});
    // Threads that have been told to end may take a moment to be gone from /proc.
    int threads = threads_of_self();
    for (int i = 0; i < 100 && threads > before; ++i) {
      usleep(10000);
      threads = threads_of_self();
    }
    char line[64];
    int n = std::snprintf(line, sizeof line, "%d %d\n", code, threads - before + 1);
    [[maybe_unused]] ssize_t w = write(report[1], line, static_cast<size_t>(n));
    _exit(0);
  }
  close(to_agent[0]);
  close(from_agent[1]);
  close(report[1]);
  int out = from_agent[0], in = to_agent[1];

  agentwire::FrameReader reader;
  auto hello = next_frame(out, reader, 20);
  ASSERT_TRUE(hello && hello->type == Type::kHello);
  AgentJob job;
  job.host = "b";
  job.cwd = "/";
  job.kill_grace = 2;
  job.heartbeat_timeout = 30;
  const char* path = std::getenv("PATH");
  job.ranks.push_back({0, {"sh", "-c", "exit 3"}, {std::string("PATH=") + (path ? path : "/usr/bin:/bin")}});
  ASSERT_TRUE(write_all(in, agentwire::encode(Type::kJob, encode_job(job))));
  auto ready = next_frame(out, reader, 20);
  ASSERT_TRUE(ready && ready->type == Type::kReady);
  ASSERT_TRUE(write_all(in, agentwire::encode(Type::kStart, "")));
  std::optional<agentwire::Frame> f;
  while ((f = next_frame(out, reader, 20)) && f->type != Type::kDone) {
  }
  ASSERT_TRUE(f) << "no kDone from the agent";
  EXPECT_EQ(f->payload, "{\"code\":3}");

  // The link stays open (no EOF, no silence): what is left running of the agent is its own.
  std::string got;
  auto deadline = deadline_in(20);
  while (got.find('\n') == std::string::npos) {
    pollfd p{report[0], POLLIN, 0};
    int ms = ms_until(deadline);
    if (ms <= 0 || poll(&p, 1, ms) <= 0) break;
    char buf[64];
    ssize_t r = read(report[0], buf, sizeof buf);
    if (r <= 0) break;
    got.append(buf, static_cast<size_t>(r));
  }
  close(in);
  close(out);
  close(report[0]);
  int st = 0;
  pid_t r = 0;
  for (int i = 0; i < 500 && (r = waitpid(child, &st, WNOHANG)) == 0; ++i) usleep(10000);
  if (r == 0) {
    kill(child, SIGKILL);
    waitpid(child, &st, 0);
  }
  EXPECT_EQ(r, child) << "the agent's process did not end within 5 s of its report";
#if defined(__SANITIZE_THREAD__)
  // TSan's runtime keeps threads of its own (two, asleep in nanosleep, after the agent's
  // forks), so the count means nothing there; the Release and ASan runs check it.
  EXPECT_EQ(got.substr(0, 2), "3 ") << "expected: exit code 3";
#else
  EXPECT_EQ(got, "3 1\n") << "expected: exit code 3, and only the main thread left";
#endif
}

// hvdrun's stdin for a remote rank 0 (kStdin frames): the agent says how much of it rank 0
// has taken (kStdinTaken), for hvdrun to send no more than kStdinWindow ahead of it.
TEST(RemoteAgent, SaysHowMuchOfItsStdinRankZeroTook) {
  AgentProcess agent = fork_agent();
  ASSERT_GT(agent.child, 0);
  int out = agent.out, in = agent.in;
  agentwire::FrameReader reader;
  auto hello = next_frame(out, reader, 20);
  ASSERT_TRUE(hello && hello->type == Type::kHello);
  AgentJob job;
  job.host = "b";
  job.cwd = "/";
  job.stdin_to_rank0 = true;
  const char* path = std::getenv("PATH");
  // Rank 0 reads all of its stdin, then waits for the test's word (a file) to end.
  char tmpl[] = "/tmp/remote_agent_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string go = std::string(tmpl) + "/go";
  job.ranks.push_back({0, {"sh", "-c", "cat >/dev/null; while [ ! -e " + go + " ]; do sleep 0.02; done"},
                       {std::string("PATH=") + (path ? path : "/usr/bin:/bin")}});
  ASSERT_TRUE(write_all(in, agentwire::encode(Type::kJob, encode_job(job))));
  auto ready = next_frame(out, reader, 20);
  ASSERT_TRUE(ready && ready->type == Type::kReady);
  ASSERT_TRUE(write_all(in, agentwire::encode(Type::kStart, "")));
  const size_t total = 300000;
  for (size_t sent = 0; sent < total; sent += 10000)
    ASSERT_TRUE(write_all(in, agentwire::encode(Type::kStdin, std::string(10000, 'x'))));
  ASSERT_TRUE(write_all(in, agentwire::encode(Type::kStdin, "")));  // the end of hvdrun's stdin
  size_t taken = 0;
  std::optional<agentwire::Frame> f;
  while (taken < total && (f = next_frame(out, reader, 20)) && f->type != Type::kDone)
    if (f->type == Type::kStdinTaken) {
      auto j = nlohmann::json::parse(f->payload, nullptr, false);
      if (j.is_object()) taken += j.value("bytes", size_t{0});
    }
  std::fclose(std::fopen(go.c_str(), "w"));
  while ((f = next_frame(out, reader, 20)) && f->type != Type::kDone) {
  }
  std::remove(go.c_str());
  rmdir(tmpl);
  ASSERT_TRUE(f) << "no kDone from the agent";
  EXPECT_EQ(f->payload, "{\"code\":0}");
  EXPECT_EQ(taken, total);
  EXPECT_EQ(reap_agent(agent), agent.child) << "the agent did not exit within 5 s of its kDone";
}

// An agent runs a job asking for its Python's facts once the workers run
// (python_facts_after_start); rank 0 is `python3 worker`, both it and the probe a script the
// test writes, in `dir`. The frames from kStart on, kDone last (when it came).
std::vector<agentwire::Frame> frames_of_python_job(const std::string& dir, const std::string& script) {
  std::string exe = dir + "/python3";
  if (FILE* f = std::fopen(exe.c_str(), "w")) {
    std::fputs(script.c_str(), f);
    std::fclose(f);
  }
  chmod(exe.c_str(), 0755);
  AgentProcess agent = fork_agent();
  if (agent.child <= 0) return {};
  int out = agent.out, in = agent.in;
  agentwire::FrameReader reader;
  std::vector<agentwire::Frame> frames;
  auto hello = next_frame(out, reader, 20);
  AgentJob job;
  job.host = "b";
  job.cwd = "/";
  job.python_facts_after_start = true;
  const char* path = std::getenv("PATH");
  job.ranks.push_back({0, {"python3", "worker"}, {"PATH=" + dir + ":" + (path ? path : "/usr/bin:/bin")}});
  if (hello && write_all(in, agentwire::encode(Type::kJob, encode_job(job)))) {
    auto ready = next_frame(out, reader, 20);
    EXPECT_TRUE(ready && ready->type == Type::kReady && ready->payload.empty()) << "facts before the start";
    if (ready && write_all(in, agentwire::encode(Type::kStart, "")))
      while (auto f = next_frame(out, reader, 30)) {
        frames.push_back(*f);
        if (f->type == Type::kDone) break;
      }
  }
  reap_agent(agent);
  return frames;
}

std::string testing_read(const std::string& path) {
  std::string s;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[256];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    std::fclose(f);
  }
  return s;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/remote_agent_test.XXXXXX";
  return mkdtemp(tmpl) ? tmpl : "/tmp";
}

// The probe answers only once rank 0 ran (had the agent waited for the probe before the
// start, it would have answered with its time-out's error): the facts come after the
// start, before kDone (rank 0 waits for the probe to have closed its output).
TEST(RemoteAgent, SendsThePythonFactsOnceTheWorkersRun) {
  std::string d = temp_dir();
  auto frames = frames_of_python_job(
      d, "#!/bin/sh\nwait_for() { for i in $(seq 2000); do [ -e \"$1\" ] && return 0; sleep 0.01; done; return 1; }\n"
         "if [ \"$1\" = -c ]; then wait_for " + d + "/ran; echo 3.9.9; echo 1.0; echo; exec >&- 2>&-; touch " + d +
         "/probed; exit 0; fi\ntouch " + d + "/ran; wait_for " + d + "/probed\n");
  std::filesystem::remove_all(d);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().type, Type::kDone);
  int facts = 0;
  for (const auto& f : frames)
    if (f.type == Type::kPythonFacts) {
      ++facts;
      auto r = decode_ready(f.payload);
      ASSERT_TRUE(r);
      EXPECT_EQ(r->python, (PythonFacts{"3.9.9", "1.0", "", ""}));
    }
  EXPECT_EQ(facts, 1);
}

// A probe that never answers holds neither the start nor the end: no facts (not even its
// time-out's error, 5 s later), and kDone as soon as rank 0 ended.
TEST(RemoteAgent, AHungPythonProbeHoldsNeitherTheStartNorTheEnd) {
  std::string d = temp_dir();
  auto frames = frames_of_python_job(d, "#!/bin/sh\nif [ \"$1\" = -c ]; then exec sleep 600; fi\nexit 0\n");
  std::filesystem::remove_all(d);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().type, Type::kDone);
  EXPECT_EQ(frames.back().payload, "{\"code\":0}");
  for (const auto& f : frames) EXPECT_NE(f.type, Type::kPythonFacts) << f.payload;
}

// An elastic job's agent (AgentJob::elastic, launcher/elastic_agent.cc): the workers hvdrun
// asks for run, their output comes tagged with their id and kEnded after it with their wait
// status, kKill signals one's group; hvdrun's EOF ends the one still running.
TEST(RemoteAgent, AnElasticJobsWorkersRunAsHvdrunAsks) {
  std::string d = temp_dir();
  AgentProcess a = fork_agent();
  ASSERT_GT(a.child, 0);
  agentwire::FrameReader reader;
  auto hello = next_frame(a.out, reader, 20);
  ASSERT_TRUE(hello && hello->type == Type::kHello);
  AgentJob job = elastic_sh_job("b");
  const std::vector<std::string> env = job.ranks[0].env;
  ASSERT_TRUE(write_all(a.in, agentwire::encode(Type::kJob, encode_job(job))));
  auto ready = next_frame(a.out, reader, 20);
  ASSERT_TRUE(ready && ready->type == Type::kReady);
  ASSERT_TRUE(write_all(a.in, agentwire::encode(Type::kStart, "")));
  auto spawn = [&](int id, const std::string& script) {
    return write_all(a.in, agentwire::encode(Type::kSpawn, encode_spawn({id, {"sh", "-c", script}, env})));
  };
  ASSERT_TRUE(spawn(7, "echo hi; exit 4"));
  ASSERT_TRUE(spawn(8, "trap 'echo term; exit 0' TERM; touch " + d + "/up8; while :; do sleep 0.05; done"));
  ASSERT_TRUE(spawn(9, "echo $$ > " + d + "/pid9.tmp; mv " + d + "/pid9.tmp " + d + "/pid9; exec sleep 60"));
  std::string seen;  // "id:output" and "id=status", in order
  bool killed = false;
  while (auto f = next_frame(a.out, reader, 20)) {
    int id, stream;
    std::string_view lines;
    if (f->type == Type::kOutput && agentwire::decode_output(f->payload, &id, &stream, &lines))
      seen += std::to_string(id) + ":" + std::string(lines);
    if (f->type == Type::kEnded) seen += std::to_string(decode_ended(f->payload)->id) + "=" +
                                         std::to_string(decode_ended(f->payload)->status) + "\n";
    if (!killed && std::filesystem::exists(d + "/up8")) {
      ASSERT_TRUE(write_all(a.in, agentwire::encode(Type::kKill, encode_kill({8, SIGTERM}))));
      killed = true;
    }
    if (seen.find("8=0") != std::string::npos && seen.find("7=") != std::string::npos &&
        std::filesystem::exists(d + "/pid9"))
      break;
  }
  EXPECT_NE(seen.find("7:hi\n"), std::string::npos) << seen;
  EXPECT_NE(seen.find("7=" + std::to_string(4 << 8)), std::string::npos) << seen;
  EXPECT_LT(seen.find("7:hi"), seen.find("7="));  // its output before its end
  EXPECT_NE(seen.find("8:term\n"), std::string::npos) << seen;  // kKill's SIGTERM reached its trap
  EXPECT_LT(seen.find("8:term\n"), seen.find("8=0\n")) << seen;
  pid_t nine = std::atoi(testing_read(d + "/pid9").c_str());
  ASSERT_GT(nine, 0);
  EXPECT_EQ(reap_agent(a), a.child);  // EOF: the agent ends worker 9 and exits
  EXPECT_NE(kill(nine, 0), 0) << "worker 9 outlived its agent";
  std::filesystem::remove_all(d);
}

}  // namespace
}  // namespace hvdrun
