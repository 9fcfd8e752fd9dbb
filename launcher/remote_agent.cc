#include "launcher/remote_agent.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/net.h"
#include "common/deadline.h"
#include "common/socket_io.h"
#include "common/strings.h"
#include "common/tunables.h"
#include "hvdrun_version.h"
#include "launcher/agent.h"
#include "launcher/agent_dial.h"
#include "launcher/elastic_agent.h"
#include "launcher/async_writer.h"
#include "launcher/exit_status.h"
#include "launcher/host_facts.h"
#include "launcher/host_preparation.h"
#include "launcher/link_liveness.h"

namespace hvdrun {

namespace {

using agentwire::Type;

// Frames to the launcher on stdout; any thread. A failed write (the launcher is gone)
// ends the job on this host.
class LauncherLink {
 public:
  explicit LauncherLink(int fd) : fd_(fd) {}
  bool send(const std::string& frame) {
    std::lock_guard<std::mutex> lk(mu_);
    if (broken_) return false;
    // sshd's pipe or our socket: blocking writes pace us. EPIPE: the launcher's side is gone.
    if (!write_all(fd_, frame)) broken_ = true;
    return !broken_;
  }
  bool send(Type t, std::string_view payload) { return send(agentwire::encode(t, payload)); }

 private:
  int fd_;
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

// Why read_frame() returned no frame.
enum class NoFrame { kClosed, kTimedOut, kStopped };

// Reads one frame from `fd`, waiting at most `seconds`. EOF, an error or the time-out:
// nullopt. A readable `stop_fd` (when given) ends the wait too. *why says which.
std::optional<agentwire::Frame> read_frame(int fd, agentwire::FrameReader& reader, double seconds,
                                           int stop_fd = -1, NoFrame* why = nullptr) {
  auto deadline = deadline_in(seconds);
  char buf[65536];
  auto none = [why](NoFrame w) -> std::optional<agentwire::Frame> {
    if (why) *why = w;
    return std::nullopt;
  };
  while (true) {
    if (auto f = reader.next()) return f;
    pollfd p[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int ms = ms_until(deadline);
    if (ms <= 0) return none(NoFrame::kTimedOut);
    int n = poll(p, stop_fd >= 0 ? 2 : 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return none(NoFrame::kTimedOut);
    if (n < 0) return none(NoFrame::kClosed);
    if (stop_fd >= 0 && p[1].revents) return none(NoFrame::kStopped);
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return none(NoFrame::kClosed);
    if (!reader.feed(std::string_view(buf, static_cast<size_t>(r)))) return none(NoFrame::kClosed);
  }
}

std::string node_name() {
  std::string n = tunable_string("SLURMD_NODENAME");
  if (!n.empty()) return n;
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? buf : "";
}

// Started by srun: the ranks carry hvdrun's environment, whose Slurm variables describe
// hvdrun's own place (the batch host, task 0). The node's own are this agent's; the
// per-task ones (srun's task ids, not ranks) are dropped, so that nothing mistakes every
// rank for Slurm's task 0 on the first node.
std::vector<std::string> slurm_node_env(const std::vector<std::string>& env) {
  static const char* const kNode[] = {"SLURMD_NODENAME", "SLURM_NODEID", "SLURM_TOPOLOGY_ADDR"};
  static const char* const kTask[] = {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_TASK_PID", "SLURM_GTIDS",
                                      "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES",
                                      "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_LAUNCHER_PORT"};
  auto named = [](const std::string& kv, const char* name) {
    size_t n = std::strlen(name);
    return kv.size() > n && kv.compare(0, n, name) == 0 && kv[n] == '=';
  };
  std::vector<std::string> out;
  for (const auto& kv : env) {
    bool drop = false;
    for (const char* n : kNode) drop = drop || named(kv, n);
    for (const char* n : kTask) drop = drop || named(kv, n);
    if (!drop) out.push_back(kv);
  }
  for (const char* n : kNode)
    if (const char* v = std::getenv(n)) out.push_back(std::string(n) + "=" + v);
  return out;
}

// Rank 0's stdin taken from the agent's writer (written to its pipe, or dropped once that
// closed), for the heartbeat thread to tell hvdrun (kStdinTaken). Statics: the writer's
// thread, which may outlive run_agent_mode, touches nothing else.
std::atomic<uint64_t> g_stdin_taken{0};
std::atomic<bool> g_stdin_closed{false};
int g_stdin_wake[2] = {-1, -1};  // the writer's thread wakes the heartbeat thread here
// Rank 0's stdin: a pipe fed from kStdin frames by a writer thread, so that a rank that
// does not read never stalls the frames from hvdrun (heartbeats among them). Never
// destroyed: its thread may still be blocked writing when the agent exits, so it is
// detached (never joined: once it had ended, at the end of rank 0's stdin, TSan reported
// it as a leaked thread at the agent's exit). Held by a static, not a leak to
// LeakSanitizer (whose report at exit hvdrun shows).
AsyncWriter* g_stdin_writer = nullptr;
// How long the launcher had been silent when this agent gave it up (0: it did not).
std::atomic<int> g_lost_contact_s{0};

// --start-timeout=SECONDS; anything else is the exit code 2, its line printed.
Result<double> parse_agent_args(const std::vector<std::string>& args) {
  double start_timeout = 30;
  for (const auto& a : args) {
    if (!starts_with(a, "--start-timeout="))
      return make_error(ErrorKind::kUsage,
                        "--agent: unexpected argument '" + printable(a) + "' (expected --start-timeout=SECONDS)");
    auto v = parse_double(a.substr(16), "--agent --start-timeout", 0.001, 1e7);
    if (!v) return with_kind(v.error(), ErrorKind::kUsage);
    start_timeout = *v;
  }
  return start_timeout;
}

// The stream to the launcher: a TCP connection back to hvdrun (srun started us), or our
// stdin and stdout.
struct LauncherStream {
  UniqueFd sock;
  int in_fd = 0, out_fd = 1;
};

// 0, or the exit code (its line printed).
int open_stream(const std::string& node, LauncherStream& st, std::chrono::steady_clock::time_point deadline) {
  std::string dial = tunable_string("HVDRUN_AGENT_CONNECT");
  if (!dial.empty()) {
    auto s = dial_launcher(dial, node, deadline);
    if (!s) {
      std::fprintf(stderr, "hvdrun --agent on %s: %s\n", node.c_str(), s.error().message.c_str());
      return 1;
    }
    st.sock = std::move(*s);
    st.in_fd = st.out_fd = st.sock.get();
  } else if (isatty(1) || isatty(0)) {
    std::fprintf(stderr, "hvdrun: --agent is what hvdrun starts on remote hosts (over SSH, a launch command or "
                         "srun); it speaks a binary protocol on stdin/stdout and is not for a terminal\n");
    return 2;
  }
  return 0;
}

AgentHello make_hello(const std::string& node, const UniqueFd& sock) {
  AgentHello hello;
  hello.version = HVDRUN_VERSION_STRING;
  hello.node = node;
  hello.network_stack = network_stack_id();
  if (auto all = interface_addresses()) hello.ifaces = *all;
  if (sock.valid()) {
    hello.launcher_addr = socket_peer_address(sock.get());
    hello.host_addr = socket_local_address(sock.get());
  }
  auto port = free_tcp_port();
  hello.free_port = port ? *port : 0;
  hello.facts = collect_host_facts();
  return hello;
}

// This host made ready for the job: its working directory, then the program, the process
// budget for its ranks and the watchdog (host_preparation.h, as on hvdrun's machine). The
// program's path and the watchdog, or the error (its kind travels to hvdrun with it).
Result<PreparedHost> prepare_agent_host(const AgentJob& job) {
  if (chdir(job.cwd.c_str()) != 0)
    return error_of(ErrorKind::kLaunchFailed, "working directory " + job.cwd + " is not usable here (" +
                                                  std::strerror(errno) +
                                                  "); hvdrun starts remote ranks in the launcher's working directory");
  HostNeed need;
  need.program = job.ranks[0].argv[0];
  need.path = path_in(job.ranks[0].env);
  need.budget.local_ranks = static_cast<long long>(job.ranks.size());  // this host's workers
  need.bind_to = job.bind_to;
  return prepare_host(need, job.kill_grace);
}

// kReady's facts: for a Python command, that Python's and its torch's versions, as the
// ranks' PATH finds it (one quick probe, within min(5 s, the start time-out)).
AgentReady ready_facts(const AgentJob& job, double start_timeout) {
  AgentReady r;
  if (!job.python_facts || !runs_python(job.ranks[0].argv)) return r;
  r.has_python = true;
  r.python = probe_python_facts(job.ranks[0].argv[0], job.ranks[0].env, std::min(kPythonProbeTimeout, start_timeout));
  return r;
}

// Rank 0's stdin as a pipe from g_stdin_writer (ao.rank0_stdin_fd; `read_end` holds it).
// hvdrun sends more only as rank 0 takes it (kStdinWindow in flight): a rank 0 that does
// not read its stdin held all of hvdrun's here (314 MB after 18 s of a fast pipe).
Status open_rank0_stdin(AgentOptions& ao, UniqueFd& read_end) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return {};  // (as before: rank 0 reads nothing)
  read_end.reset(p[0]);
  g_stdin_writer = new AsyncWriter(UniqueFd(p[1]));
  g_stdin_writer->detach_thread();
  // hvdrun keeps to the window; a launcher that did not would hold the control thread here,
  // not grow this agent's memory.
  g_stdin_writer->set_capacity(agentwire::kStdinWindow);
  ao.rank0_stdin_fd = p[0];
  if (pipe2(g_stdin_wake, O_CLOEXEC | O_NONBLOCK) != 0)
    return error_of(ErrorKind::kLaunchFailed, std::string("pipe: ") + std::strerror(errno));
  g_stdin_writer->on_done([](size_t bytes, bool failed) {
    g_stdin_taken += bytes;
    if (failed) g_stdin_closed = true;
    char c = 1;
    [[maybe_unused]] ssize_t n = ::write(g_stdin_wake[1], &c, 1);
  });
  return {};
}

// The launcher's side: relayed signals, heartbeats, and EOF or silence when it (or the
// connection) is gone. Both threads use run_agent_mode's objects (the agent, the link, the
// reader): they are stopped and joined before it returns (the destructor, which runs
// before those objects' own). Left running (detached), the control thread took the EOF of
// hvdrun closing the link after kDone while this process was exiting, and wrote into the
// agent that had gone with this frame (ASan's detect_stack_use_after_return: 8 of 10
// agents of Cluster.RemoteWorkerKilledTearsDownTheJobWithItsRankAndHost; plain ASan: a
// leaked vector grown inside the dead agent, exit 1, in 79 of 250 agents under load), and
// the heartbeat thread wrote through the dead link: a corrupted exit (CI once saw an agent
// still alive 10 s after hvdrun had ended).
struct LinkThreads {
  std::mutex mu;
  std::condition_variable cv;
  bool stop_heartbeat = false, stop_control = false;  // under mu
  UniqueFd stop_rd, stop_wr;  // the control thread's poll wakes on this pipe
  UniqueFd beat_rd, beat_wr;  // and the heartbeat thread's on this one
  std::thread control, heartbeat;
  bool open() {
    int p[2], q[2];
    if (pipe2(p, O_CLOEXEC) != 0 || pipe2(q, O_CLOEXEC) != 0) return false;
    stop_rd.reset(p[0]);
    stop_wr.reset(p[1]);
    beat_rd.reset(q[0]);
    beat_wr.reset(q[1]);
    return true;
  }
  ~LinkThreads() {
    // The heartbeat first, while the control thread still stands guard: should a write to
    // a launcher that stopped reading hold the heartbeat, the control thread still ends
    // this process on the launcher's silence.
    {
      std::lock_guard<std::mutex> lk(mu);
      stop_heartbeat = true;
    }
    char b = 1;
    [[maybe_unused]] ssize_t w = ::write(beat_wr.get(), &b, 1);
    if (heartbeat.joinable()) heartbeat.join();
    {
      std::lock_guard<std::mutex> lk(mu);
      stop_control = true;
    }
    cv.notify_all();
    char c = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_wr.get(), &c, 1);
    if (control.joinable()) control.join();
  }
};

// The control thread: hvdrun's frames (signals, stdin) until the job is over here, or until
// hvdrun is gone (EOF, or silent for the heartbeat time-out): then the workers are ended.
void control_loop(LocalAgent& agent, agentwire::FrameReader& reader, LinkThreads& threads, int in_fd, double silence,
                  double grace) {
  // hvdrun's silence after it relayed a Ctrl-Z's SIGSTOP is that stop (LinkLiveness); EOF
  // still ends the ranks (hvdrun killed while stopped).
  LinkLiveness liveness(silence, std::chrono::steady_clock::now());
  while (true) {
    NoFrame why = NoFrame::kClosed;
    auto f = read_frame(in_fd, reader, silence, threads.stop_rd.get(), &why);
    if (!f && why == NoFrame::kStopped) return;  // the job is over here: kDone has gone
    if (!f && why == NoFrame::kTimedOut && liveness.held()) continue;
    if (!f) {
      g_lost_contact_s = std::max(1, static_cast<int>(liveness.quiet_s(std::chrono::steady_clock::now()) + 0.5));
      break;
    }
    liveness.heard(std::chrono::steady_clock::now());
    if (auto sig = agentwire::decode_signal(f->payload); f->type == Type::kSignal && sig) {
      liveness.relayed(*sig, std::chrono::steady_clock::now());
      agent.request_signal(*sig);
    }
    if (f->type == Type::kStdin && g_stdin_writer) {
      if (f->payload.empty()) g_stdin_writer->close_after_queued();  // end of hvdrun's stdin
      else g_stdin_writer->write(std::move(f->payload));
    }
  }
  agent.request_signal(SIGTERM);  // lost the launcher: end the workers (grace, then SIGKILL)
  // If the agent's loop is stuck writing to a dead connection, leave the ending to the
  // watchdog, which holds every worker's group.
  std::unique_lock<std::mutex> lk(threads.mu);
  if (!threads.cv.wait_for(lk, std::chrono::duration<double>(grace + 2), [&threads] { return threads.stop_control; }))
    _exit(1);
}

// The heartbeat thread: heartbeats, and what rank 0 has taken of its stdin as the writer says.
void heartbeat_loop(LauncherLink& link, LinkThreads& threads) {
  using Clock = std::chrono::steady_clock;
  auto next_beat = Clock::now();
  uint64_t told = 0;
  bool closed_told = false;
  while (true) {
    {
      std::lock_guard<std::mutex> lk(threads.mu);
      if (threads.stop_heartbeat) return;
    }
    auto now = Clock::now();
    if (now >= next_beat) {
      if (!link.send(Type::kHeartbeat, "")) return;
      next_beat =
          now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(agentwire::kHeartbeatInterval));
    }
    uint64_t taken = g_stdin_taken.load();
    if (taken != told) {
      if (!link.send(Type::kStdinTaken, encode_stdin_taken({taken - told, false}))) return;
      told = taken;
    }
    if (g_stdin_closed && !closed_told) {
      if (!link.send(Type::kStdinTaken, encode_stdin_taken({0, true}))) return;
      closed_told = true;
    }
    pollfd p[2] = {{threads.beat_rd.get(), POLLIN, 0}, {g_stdin_wake[0], POLLIN, 0}};
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - Clock::now()).count()) + 1;
    poll(p, 2, std::max(ms, 0));
    char drain[64];
    if (g_stdin_wake[0] >= 0)
      while (::read(g_stdin_wake[0], drain, sizeof drain) > 0) {
      }
  }
}

// The agent's options: what it reports goes to hvdrun as frames.
AgentOptions agent_options(const AgentJob& job, LauncherLink& link) {
  AgentOptions ao;
  ao.kill_grace = job.kill_grace;
  ao.stdin_to_rank0 = false;
  ao.on_exit0 = [&link](int rank) { link.send(Type::kExited, encode_exited({rank})); };
  ao.on_slurm_signal = [&link](int sig) { link.send(Type::kSlurmSignal, encode_slurm_signal({sig})); };
  ao.on_failure = [&link](int rank, const std::string&, int status) {
    link.send(Type::kFailed, encode_failed({rank, status}));
  };
  return ao;
}

std::vector<WorkerLaunch> launches_of(const AgentJob& job, const PreparedHost& host, bool dialed) {
  std::vector<WorkerLaunch> launches;
  for (const auto& r : job.ranks) {
    const std::string& exe = host.exe;
    WorkerLaunch l;
    l.rank = r.rank;
    l.host = job.host;
    l.request.exe = exe;
    l.request.argv = r.argv;
    l.request.env = dialed ? slurm_node_env(r.env) : r.env;
    if (launches.size() < host.placement.size()) l.request.cpus = host.placement[launches.size()].cpus;
    launches.push_back(std::move(l));
  }
  return launches;
}

// The error's kind travels with it: hvdrun's exit-code table decides there.
int report_setup_error(LauncherLink& link, const Error& error) {
  int code = exit_code_for(error);
  link.send(Type::kSetupError, encode_setup_error({error.message, code, error.kind}));
  return code;
}

// The job on this host, once hvdrun has said start: the ranks run, their output and ends
// go to hvdrun, and kDone says the job's code. The agent's exit code.
int run_ranks(const AgentJob& job, PreparedHost& host, LauncherLink& link, agentwire::FrameReader& reader,
              const LauncherStream& stream) {
  auto setup_error = [&link](const Error& error) { return report_setup_error(link, error); };
  FramedSink sink(link);
  AgentOptions ao = agent_options(job, link);
  UniqueFd rank0_stdin;
  if (job.stdin_to_rank0)
    if (auto st = open_rank0_stdin(ao, rank0_stdin); !st) return setup_error(st.error());
  LocalAgent agent(ao, sink, &host.watchdog);
  LinkThreads threads;  // after the objects its threads use: stopped and joined first
  if (!threads.open())
    return setup_error(error_of(ErrorKind::kLaunchFailed, std::string("pipe: ") + std::strerror(errno)));
  threads.control = std::thread(control_loop, std::ref(agent), std::ref(reader), std::ref(threads), stream.in_fd,
                                job.heartbeat_timeout, job.kill_grace);
  threads.heartbeat = std::thread(heartbeat_loop, std::ref(link), std::ref(threads));

  // The Python facts are found while the ranks start and run, and never hold the end.
  std::optional<PythonProbe> probe;
  if (job.python_facts_after_start && runs_python(job.ranks[0].argv))
    probe.emplace(job.ranks[0].argv[0], job.ranks[0].env, kPythonProbeTimeout, [&link](const PythonFacts& p) {
      link.send(Type::kPythonFacts, encode_ready({true, p}));
    });
  AgentResult res = agent.run(launches_of(job, host, stream.sock.valid()));
  if (probe) probe->stop();  // (before kDone: facts that came are sent first)
  host.watchdog.disarm();
  // lost_contact_s > 0: hvdrun was silent (stopped, say) and the ranks were ended for it.
  link.send(Type::kDone, encode_done({res.exit_code, g_lost_contact_s.load()}));
  // Started by srun: the job's code has reached hvdrun; a non-zero exit here would make
  // srun (--kill-on-bad-exit) kill the other hosts' agents before they end their ranks.
  if (stream.sock.valid()) return 0;
  return res.exit_code;
}

}  // namespace

int run_agent_mode(const std::vector<std::string>& args) {
  auto start_timeout = parse_agent_args(args);
  if (!start_timeout) {
    std::fprintf(stderr, "hvdrun: %s\n", start_timeout.error().message.c_str());
    return exit_code_for(start_timeout.error());
  }
  // The launcher sends the job once every host has said hello, and the start once every
  // host is ready: both within its --start-timeout of starting us (a margin for the
  // starter's own time). A launcher gone silent meanwhile (a network cut sends no FIN) is
  // given up then, not after an hour.
  auto start_deadline = deadline_in(*start_timeout + 10);
  std::string node = node_name();
  LauncherStream stream;
  if (int code = open_stream(node, stream, start_deadline); code != 0) return code;
  LauncherLink link(stream.out_fd);
  if (!link.send(Type::kHello, encode_hello(make_hello(node, stream.sock)))) return 1;

  agentwire::FrameReader reader;
  // The launcher sends the job once every host has said hello: it may wait for the slowest.
  auto jf = read_frame(stream.in_fd, reader, seconds_until(start_deadline));
  if (!jf) return 0;  // the launcher gave up (another host failed): nothing was started
  if (jf->type != Type::kJob) return 1;
  auto job = decode_job(jf->payload);
  auto setup_error = [&link](const Error& error) { return report_setup_error(link, error); };
  if (!job) return setup_error(with_kind(job.error(), ErrorKind::kLaunchFailed));
  auto host = prepare_agent_host(*job);
  if (!host) return setup_error(host.error());
  if (!link.send(Type::kReady, encode_ready(ready_facts(*job, *start_timeout)))) return 1;

  auto sf = read_frame(stream.in_fd, reader, seconds_until(start_deadline));
  if (!sf || sf->type != Type::kStart) {
    host->watchdog.disarm();
    return 0;  // the launcher stopped before the start: nothing was started
  }
  if (job->elastic) return run_elastic_agent(*job, *host, stream.in_fd, stream.out_fd, reader);
  return run_ranks(*job, *host, link, reader, stream);
}

}  // namespace hvdrun
