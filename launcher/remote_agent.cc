#include "launcher/remote_agent.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/net.h"
#include "common/deadline.h"
#include "common/socket_io.h"
#include "common/strings.h"
#include "hvdrun_version.h"
#include "launcher/agent.h"
#include "launcher/async_writer.h"
#include "launcher/spawn.h"
#include "launcher/watchdog.h"

namespace hvdrun {

std::string encode_job(const AgentJob& job) {
  nlohmann::json j;
  j["host"] = job.host;
  j["cwd"] = job.cwd;
  j["kill_grace"] = job.kill_grace;
  j["heartbeat_timeout"] = job.heartbeat_timeout;
  j["stdin"] = job.stdin_to_rank0;
  j["ranks"] = nlohmann::json::array();
  for (const auto& r : job.ranks) j["ranks"].push_back({{"rank", r.rank}, {"argv", r.argv}, {"env", r.env}});
  return j.dump();
}

Result<AgentJob> decode_job(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    AgentJob job;
    job.host = j.at("host").get<std::string>();
    job.cwd = j.at("cwd").get<std::string>();
    job.kill_grace = j.at("kill_grace").get<double>();
    job.heartbeat_timeout = j.at("heartbeat_timeout").get<double>();
    job.stdin_to_rank0 = j.at("stdin").get<bool>();
    for (const auto& r : j.at("ranks"))
      job.ranks.push_back({r.at("rank").get<int>(), r.at("argv").get<std::vector<std::string>>(),
                           r.at("env").get<std::vector<std::string>>()});
    if (job.ranks.empty() || job.ranks[0].argv.empty()) return make_error("job without ranks or command");
    return job;
  } catch (const std::exception& e) {
    return make_error(std::string("bad job description: ") + e.what());
  }
}

std::string encode_hello(const AgentHello& h) {
  return nlohmann::json{{"launcher_addr", h.launcher_addr}, {"host_addr", h.host_addr}, {"host_iface", h.host_iface},
                        {"free_port", h.free_port}, {"version", h.version}}
      .dump();
}

Result<AgentHello> decode_hello(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    AgentHello h;
    h.launcher_addr = j.at("launcher_addr").get<std::string>();
    h.host_addr = j.at("host_addr").get<std::string>();
    h.host_iface = j.at("host_iface").get<std::string>();
    h.free_port = j.at("free_port").get<int>();
    h.version = j.at("version").get<std::string>();
    return h;
  } catch (const std::exception& e) {
    return make_error(std::string("bad hello from the agent: ") + e.what());
  }
}

namespace {

using agentwire::Type;

// Frames to the launcher on stdout; any thread. A failed write (the launcher is gone)
// ends the job on this host.
class LauncherLink {
 public:
  bool send(const std::string& frame) {
    std::lock_guard<std::mutex> lk(mu_);
    if (broken_) return false;
    // stdout is sshd's pipe: blocking writes pace us. EPIPE: the launcher's side is gone.
    if (!write_all(1, frame)) broken_ = true;
    return !broken_;
  }
  bool send(Type t, std::string_view payload) { return send(agentwire::encode(t, payload)); }

 private:
  std::mutex mu_;
  bool broken_ = false;
};

class FramedSink : public OutputSink {
 public:
  explicit FramedSink(LauncherLink& link) : link_(link) {}
  void write_lines(int rank, StreamKind stream, std::string_view lines) override {
    if (!lines.empty()) link_.send(agentwire::encode_output(rank, static_cast<int>(stream), lines));
  }
  bool congested() const override { return false; }  // writes block: the launcher paces us
  void notice(std::string_view line) override {
    std::string l(line);
    if (l.empty() || l.back() != '\n') l.push_back('\n');
    link_.send(agentwire::encode_output(-1, 1, l));  // rank -1: hvdrun's own line
  }
  void drain() override {}

 private:
  LauncherLink& link_;
};

// Reads one frame from stdin, waiting at most `seconds`. EOF or an error: nullopt.
std::optional<agentwire::Frame> read_frame(agentwire::FrameReader& reader, double seconds) {
  auto deadline = deadline_in(seconds);
  char buf[65536];
  while (true) {
    if (auto f = reader.next()) return f;
    pollfd p{0, POLLIN, 0};
    int ms = ms_until(deadline);
    if (ms <= 0) return std::nullopt;
    int n = poll(&p, 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    ssize_t r = read(0, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;
    if (!reader.feed(std::string_view(buf, static_cast<size_t>(r)))) return std::nullopt;
  }
}


}  // namespace

int run_agent_mode() {
  if (isatty(1) || isatty(0)) {
    std::fprintf(stderr, "hvdrun: --agent is what hvdrun starts on remote hosts over SSH; it speaks a binary "
                         "protocol on stdin/stdout and is not for a terminal\n");
    return 2;
  }
  LauncherLink link;
  AgentHello hello;
  hello.version = HVDRUN_VERSION_STRING;
  if (const char* conn = std::getenv("SSH_CONNECTION")) {
    auto parts = split(conn, ' ');
    if (parts.size() >= 3) {
      hello.launcher_addr = parts[0];
      hello.host_addr = parts[2];
      if (auto i = interface_with_address(parts[2])) hello.host_iface = *i;
    }
  }
  auto port = free_tcp_port();
  hello.free_port = port ? *port : 0;
  if (!link.send(Type::kHello, encode_hello(hello))) return 1;

  agentwire::FrameReader reader;
  // The launcher sends the job once every host has said hello: it may wait for the slowest.
  auto jf = read_frame(reader, 3600);
  if (!jf) return 0;  // the launcher gave up (another host failed): nothing was started
  if (jf->type != Type::kJob) return 1;
  auto job = decode_job(jf->payload);
  auto setup_error = [&](const std::string& message, int code) {
    link.send(Type::kSetupError, nlohmann::json{{"message", message}, {"code", code}}.dump());
    return code;
  };
  if (!job) return setup_error(job.error().message, 3);
  if (chdir(job->cwd.c_str()) != 0)
    return setup_error("working directory " + job->cwd + " is not usable here (" + std::strerror(errno) +
                           "); hvdrun starts remote ranks in the launcher's working directory",
                       3);
  std::string path;
  for (const auto& kv : job->ranks[0].env)
    if (starts_with(kv, "PATH=")) path = kv.substr(5);
  auto exe = resolve_program(job->ranks[0].argv[0], path);
  if (!exe) return setup_error(exe.error().message, exe.error().code);
  auto watchdog = Watchdog::start(job->kill_grace);
  if (!watchdog) return setup_error(watchdog.error().message, 3);
  if (!link.send(Type::kReady, "")) return 1;

  auto sf = read_frame(reader, 3600);
  if (!sf || sf->type != Type::kStart) {
    watchdog->disarm();
    return 0;  // the launcher stopped before the start: nothing was started
  }

  FramedSink sink(link);
  AgentOptions ao;
  ao.kill_grace = job->kill_grace;
  ao.stdin_to_rank0 = false;
  // Rank 0's stdin: a pipe fed from kStdin frames by a writer thread, so that a rank that
  // does not read never stalls the frames from hvdrun (heartbeats among them). Never
  // destroyed: its thread may still be blocked writing when the agent exits.
  UniqueFd rank0_stdin;
  AsyncWriter* stdin_writer = nullptr;
  if (int p[2]; job->stdin_to_rank0 && pipe2(p, O_CLOEXEC) == 0) {
    rank0_stdin.reset(p[0]);
    stdin_writer = new AsyncWriter(UniqueFd(p[1]));
    ao.rank0_stdin_fd = p[0];
  }
  ao.on_failure = [&link](int rank, const std::string&, int status) {
    link.send(Type::kFailed, nlohmann::json{{"rank", rank}, {"status", status}}.dump());
  };
  LocalAgent agent(ao, sink, &*watchdog);

  // The launcher's side: relayed signals, heartbeats, and EOF or silence when it (or the
  // connection) is gone.
  double silence = job->heartbeat_timeout, grace = job->kill_grace;
  std::thread control([&agent, &reader, silence, grace, stdin_writer] {
    while (true) {
      auto f = read_frame(reader, silence);
      if (!f) break;
      if (f->type == Type::kSignal && f->payload.size() == 1) agent.request_signal(static_cast<unsigned char>(f->payload[0]));
      if (f->type == Type::kStdin && stdin_writer) {
        if (f->payload.empty()) stdin_writer->close_after_queued();  // end of hvdrun's stdin
        else stdin_writer->write(std::move(f->payload));
      }
    }
    agent.request_signal(SIGTERM);  // lost the launcher: end the workers (grace, then SIGKILL)
    // If the agent's loop is stuck writing to a dead connection, leave the ending to the
    // watchdog, which holds every worker's group.
    std::this_thread::sleep_for(std::chrono::duration<double>(grace + 2));
    _exit(1);
  });
  control.detach();  // blocked in read(stdin) until the process exits
  std::thread heartbeat([&link] {
    while (link.send(Type::kHeartbeat, ""))
      std::this_thread::sleep_for(std::chrono::duration<double>(agentwire::kHeartbeatInterval));
  });
  heartbeat.detach();

  std::vector<WorkerLaunch> launches;
  for (const auto& r : job->ranks) {
    WorkerLaunch l;
    l.rank = r.rank;
    l.host = job->host;
    l.request.exe = *exe;
    l.request.argv = r.argv;
    l.request.env = r.env;
    launches.push_back(std::move(l));
  }
  AgentResult res = agent.run(std::move(launches));
  watchdog->disarm();
  link.send(Type::kDone, nlohmann::json{{"code", res.exit_code}}.dump());
  return res.exit_code;
}

}  // namespace hvdrun
