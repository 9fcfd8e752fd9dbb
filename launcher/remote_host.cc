#include "launcher/remote_host.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdint>

#include "common/deadline.h"
#include "common/socket_io.h"
#include "common/strings.h"
#include "hvdrun_version.h"
#include "launcher/plan.h"

namespace hvdrun {

using agentwire::Type;

namespace {
double wall_clock_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
// The host's clock, read between `opened` and `heard` on ours, is at least this far off
// ours: 0 when it fell between them (a loaded machine that reads the hello late is no skew).
double clock_offset_at_least(double theirs, double opened, double heard) {
  if (theirs > heard) return theirs - heard;
  if (theirs < opened) return theirs - opened;
  return 0;
}
}  // namespace

RemoteHost::RemoteHost(std::string host, RemoteSettings settings, AgentStarter& starter)
    : host_(std::move(host)), settings_(std::move(settings)), starter_(starter), created_(wall_clock_now()) {}

RemoteHost::~RemoteHost() {
  join();
  close();
}

Status RemoteHost::connect(std::chrono::steady_clock::time_point deadline) {
  auto link = starter_.open(host_, deadline);
  if (!link) return link.error();
  link_ = std::move(*link);
  auto f = next_frame(deadline);
  if (!f && f.error().kind == ErrorKind::kInterrupted) return f.error();  // the job's end: no exit to wait for
  if (!f) return error_of(ErrorKind::kLaunchFailed, describe_exit(f.error().message));
  if (f->type != Type::kHello) return make_error(ErrorKind::kLaunchFailed,
                                                 link_->label() + ": unexpected first message from the agent");
  auto h = decode_hello(f->payload);
  if (!h) return make_error(ErrorKind::kLaunchFailed, link_->label() + ": " + h.error().message);
  hello_ = *h;
  clock_offset_ = hello_.facts.clock > 0 ? clock_offset_at_least(hello_.facts.clock, created_, wall_clock_now()) : 0;
  // Another version that speaks this protocol is the pre-flight check's to judge (a warning).
  if (hello_.facts.protocol != agentwire::kProtocol)
    return error_of(ErrorKind::kLaunchFailed, link_->label() + ": remote hvdrun " + settings_.remote_hvdrun + " is version " + hello_.version +
                          " (agent protocol " + std::to_string(hello_.facts.protocol) + "), this one " + HVDRUN_VERSION_STRING +
                          " (protocol " + std::to_string(agentwire::kProtocol) + "): they cannot talk; install the same version on every host");
  // Our own socket's two ends, when the link is one, say exactly how this host reaches us.
  if (std::string l = link_->local_address(), p = link_->peer_address(); !l.empty() && !p.empty()) {
    hello_.launcher_addr = l;
    hello_.host_addr = p;
  }
  return {};
}

// Why the agent never spoke: its exit status and stderr say (127: no hvdrun there).
std::string RemoteHost::describe_exit(const std::string& what) {
  std::string err = link_->stderr_text();
  while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
  if (auto nl = err.rfind('\n'); nl != std::string::npos) err = err.substr(nl + 1);
  auto st = link_->exit_status();
  if (st && (*st == 127 || *st == 126))
    return link_->label() + ": remote hvdrun " + settings_.remote_hvdrun + " " +
           (*st == 127 ? "not found" : "not executable") + (err.empty() ? "" : " (" + err + ")") +
           "; install hvdrun at the same path there, or pass --remote-hvdrun PATH";
  if (st && *st == 255 && !err.empty()) return link_->label() + ": " + err;  // the ssh client's own failure
  std::string msg = what;
  if (st) msg += " (exit " + std::to_string(*st) + ")";
  if (!err.empty()) msg += ": " + err;
  return msg;
}

Status RemoteHost::check_abort() const {
  if (abort_ && abort_->load()) return make_error(ErrorKind::kInterrupted, "host " + host_ + ": the job ended while its agent started");
  return {};
}

Result<agentwire::Frame> RemoteHost::next_frame(std::chrono::steady_clock::time_point deadline) {
  while (true) {
    if (auto f = reader_.next()) return *std::move(f);
    if (auto st = check_abort(); !st) return st.error();
    int ms = ms_until(deadline);
    if (ms <= 0)
      return make_error(ErrorKind::kTimeout, link_->label() + ": no answer from the agent within --start-timeout (" +
                                                 std::to_string(static_cast<int>(settings_.start_timeout)) + " s)");
    auto bytes = link_->read(std::min(ms, 200));
    if (!bytes) {
      if (auto s = reader_.finish(); !s && bytes.error().kind == ErrorKind::kPeerLost) return stream_error(s.error());
      return bytes.error();
    }
    if (!bytes->empty())
      if (auto s = reader_.feed(*bytes); !s) return stream_error(s.error());
  }
}

// Bytes on the link that are no frame: before the first frame, text that the starter's
// command or the remote shell printed (the starter says whose); later, where the stream broke.
Error RemoteHost::stream_error(const Error& e) const {
  if (reader_.any_frame()) return make_error(ErrorKind::kLaunchFailed, link_->label() + ": " + e.message);
  return make_error(ErrorKind::kLaunchFailed, link_->label() + ": " + starter_.text_before_agent(reader_.stuck_at()));
}

// The job goes a chunk at a time, as the link has room, by the start time-out: a far side
// that takes nothing (an agent or client stopped or hung after its hello) held hvdrun in a
// write for good, with every host's agent and --start-timeout waiting on it, once the job
// was larger than the pipe or SSH window (each rank's environment travels in it).
Status RemoteHost::write_by(std::string_view data, std::chrono::steady_clock::time_point deadline) {
  while (!data.empty()) {
    size_t room = link_->write_room();
    if (room == 0) {
      if (auto st = check_abort(); !st) return st;
      if (ms_until(deadline) <= 0)
        return error_of(ErrorKind::kLaunchFailed,
                        describe_exit(link_->label() + ": the agent did not take the job within --start-timeout (" +
                                      std::to_string(static_cast<int>(settings_.start_timeout)) + " s)"));
      // A read while waiting: libssh takes the window's adjustments as it reads, and an
      // agent that died says so here (its frames, if any, are kept for next_frame).
      auto bytes = link_->read(10);
      if (!bytes) return error_of(ErrorKind::kLaunchFailed, describe_exit(bytes.error().message));
      if (!bytes->empty())
        if (auto s = reader_.feed(*bytes); !s) return stream_error(s.error());
      continue;
    }
    size_t n = std::min(room, data.size());
    if (auto s = link_->write(data.substr(0, n)); !s) return s;
    data.remove_prefix(n);
  }
  return {};
}

Status RemoteHost::prepare(const AgentJob& job) {
  auto deadline = deadline_in(settings_.start_timeout);
  if (auto s = write_by(agentwire::encode(Type::kJob, encode_job(job)), deadline); !s) return s;
  auto f = next_frame(deadline);
  if (!f) return error_of(ErrorKind::kLaunchFailed, describe_exit(f.error().message));
  if (f->type == Type::kReady) {
    auto r = decode_ready(f->payload);  // (malformed facts: none; the check says it cannot tell)
    ready_ = r ? *r : AgentReady{};
    return {};
  }
  if (f->type == Type::kSetupError) {
    auto e = decode_setup_error(f->payload);
    AgentSetupError se = e ? *e : AgentSetupError{};
    return make_error(se.kind, "host " + host_ + ": " + se.message);
  }
  return error_of(ErrorKind::kLaunchFailed, link_->label() + ": unexpected answer to the job description");
}

void RemoteHost::start(LocalAgent& agent, OutputSink& sink) {
  agent_ = &agent;
  thread_ = std::thread([this, &agent, &sink] {
    relay(agent, sink);
    {
      std::lock_guard<std::mutex> lk(mu_);
      finished_ = true;
    }
    signals_cv_.notify_all();
    agent.wake();
  });
}

// Writes in the loop never block: a link that takes nothing (an agent or its client
// stopped, a network cut, with hvdrun's stdin filling the pipe or SSH window) held this
// thread in a heartbeat's write, past the silence check: hvdrun never said it lost contact
// and never ended, not even on a second Ctrl-C. A frame waits for room instead.
constexpr size_t kSmallFrame = 6;  // u32 length | u8 type | at most one payload byte

void RemoteHost::relay(LocalAgent& agent, OutputSink& sink) {
  if (!link_->write(agentwire::encode(Type::kStart, ""))) {
    agent.request_teardown("hvdrun: host " + host_ + ": connection lost before the start", exit_code::kLaunchFailed);
    return;
  }
  RelayState st{LinkLiveness(settings_.heartbeat_timeout, Clock::now()), Clock::now()};
  while (true) {
    auto now = Clock::now();
    if (now - st.last_sent >= std::chrono::duration<double>(agentwire::kHeartbeatInterval) &&
        link_->write_room() >= kSmallFrame) {
      (void)link_->write(agentwire::encode(Type::kHeartbeat, ""));
      st.last_sent = now;
    }
    if (st.liveness.lost(now)) {
      // The host or the network is down, or hvdrun itself was stopped (SIGSTOP, a paused VM)
      // past HVDRUN_HEARTBEAT_TIMEOUT: either way the agent there has ended its ranks.
      int quiet = static_cast<int>(st.liveness.quiet_s(now) + 0.5);
      agent.request_teardown(lost_contact_message(quiet), exit_code::kLostContact);
      return;
    }
    // Signals before stdin (which may fill the link): a teardown's SIGTERM is not held
    // behind megabytes of input.
    send_queued_signals(st);
    send_queued_stdin();
    while (auto next = reader_.next())
      if (take_frame(*next, agent, sink, st)) {
        wait_for_agent_exit(sink);
        return;
      }
    if (sink.congested()) {
      // hvdrun's output is not being taken: this host's waits in its link (the agent's
      // writes block, as a local rank's do on its pipe), not in hvdrun's memory. The
      // silence meanwhile is ours, not the agent's.
      st.liveness.heard(Clock::now());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    if (!read_link(agent, sink, st)) return;
  }
}

// The signals asked for, in order, as far as the link has room now.
void RemoteHost::send_queued_signals(RelayState& st) {
  std::vector<int> sigs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    sigs.swap(signals_);
    signals_in_flight_ = !sigs.empty();
  }
  if (sigs.empty()) return;
  size_t sent = 0;
  for (; sent < sigs.size() && link_->write_room() >= kSmallFrame; ++sent) {
    (void)link_->write(agentwire::encode_signal(sigs[sent]));
    st.liveness.relayed(sigs[sent], Clock::now());
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    // The rest, in order, before any queued meanwhile.
    signals_.insert(signals_.begin(), sigs.begin() + static_cast<std::ptrdiff_t>(sent), sigs.end());
    signals_in_flight_ = false;
  }
  signals_cv_.notify_all();
}

// One frame from the agent, handed to the sink or the agent. True at its kDone.
bool RemoteHost::take_frame(const agentwire::Frame& f, LocalAgent& agent, OutputSink& sink, RelayState& st) {
  if (f.type == Type::kOutput) {
    int rank, stream;
    std::string_view lines;
    if (!agentwire::decode_output(f.payload, &rank, &stream, &lines)) return false;
    if (rank < 0) sink.notice(std::string(lines.substr(0, lines.empty() ? 0 : lines.size() - 1)));
    else sink.write_lines(rank, stream == 0 ? StreamKind::kStdout : StreamKind::kStderr, lines);
  } else if (f.type == Type::kFailed) {
    if (auto r = decode_failed(f.payload)) {
      st.failed_reported = true;
      agent.remote_failure(r->rank, host_, r->status);
    }
  } else if (f.type == Type::kStdinTaken) {
    if (auto t = decode_stdin_taken(f.payload); t && t->closed) stdin_closed_ = true;
    else if (t)
      stdin_in_flight_ -= std::min<uint64_t>(stdin_in_flight_, t->bytes);
  } else if (f.type == Type::kSlurmSignal) {
    auto s = decode_slurm_signal(f.payload);
    if (s && s->signal == SIGTERM) agent.slurm_signal(s->signal);  // what an agent reports (handle_signal)
  } else if (f.type == Type::kExited) {
    if (auto e = decode_exited(f.payload)) agent.remote_exited_0(e->rank);
  } else if (f.type == Type::kPythonFacts) {
    auto r = decode_ready(f.payload);  // (malformed facts: none; the check cannot tell)
    if (r && r->has_python && on_python_facts_) on_python_facts_(host_, r->python);
  } else if (f.type == Type::kDone) {
    auto d = decode_done(f.payload);
    AgentDone done = d ? *d : AgentDone{};
    if (done.lost_contact_s > 0)  // the agent stopped hearing from us (we were stopped) and ended its ranks
      agent.request_teardown(lost_contact_message(done.lost_contact_s), exit_code::kLostContact);
    else if (done.code != 0 && !st.failed_reported)
      agent.request_teardown("", done.code);  // its notice said why
    return true;
  }
  return false;
}

// What the link has now (waiting 20 ms at most). False when it is gone or broken: the
// teardown is asked for.
bool RemoteHost::read_link(LocalAgent& agent, OutputSink& sink, RelayState& st) {
  auto bytes = link_->read(20);
  if (!bytes) {
    // What the client or agent said last comes with the end of its output (an ssh
    // client's "Connection to node2 closed by remote host.", an agent's own error): it
    // was read with the EOF and never shown.
    relay_stderr(sink);
    agent.request_teardown("hvdrun: " + bytes.error().message + "; the agent there ends its workers",
                           exit_code::kLostContact);
    return false;
  }
  if (!bytes->empty()) st.liveness.heard(Clock::now());
  relay_stderr(sink);
  if (!bytes->empty())
    if (auto s = reader_.feed(*bytes); !s) {
      agent.request_teardown("hvdrun: host " + host_ + ": " + s.error().message, exit_code::kLaunchFailed);
      return false;
    }
  return true;
}

// After its kDone the agent only exits: its output ends (EOF) when it has. hvdrun returns
// once every agent is gone, as mpirun once its daemons are (it had returned as soon as
// the kDone came, and an agent that then took long to exit outlived the job unseen: CI
// saw one still running 10 s after hvdrun had ended). What the agent says on stderr on its
// way out (a sanitizer's report) is shown; one that is not gone within kAgentExitWait is
// named and left to end by itself.
void RemoteHost::wait_for_agent_exit(OutputSink& sink) {
  auto deadline = deadline_in(kAgentExitWait);
  while (true) {
    int ms = ms_until(deadline);
    if (ms <= 0) {
      relay_stderr(sink);
      sink.notice("hvdrun: warning: host " + host_ + ": the agent had not exited " +
                  std::to_string(static_cast<int>(kAgentExitWait)) + " s after the end of its ranks");
      return;
    }
    auto bytes = link_->read(std::min(ms, 200));  // a last heartbeat at most: not looked at
    if (!bytes) break;  // EOF: the agent has exited (or the link is gone)
  }
  relay_stderr(sink);
}

std::string RemoteHost::lost_contact_message(int seconds) const {
  return "hvdrun: lost contact with the agent on " + host_ + " for " + std::to_string(seconds) +
         " s (HVDRUN_HEARTBEAT_TIMEOUT " + std::to_string(static_cast<int>(settings_.heartbeat_timeout)) +
         " s: the network, the host, or hvdrun itself was stopped); it ended the ranks there";
}

// The agent's own stderr (it writes there only when something is badly wrong): whole
// lines, as hvdrun's notices.
void RemoteHost::relay_stderr(OutputSink& sink) {
  std::string err = link_->stderr_text();
  size_t end = err.rfind('\n');
  if (end == std::string::npos || end + 1 <= stderr_shown_) return;
  for (const auto& line : split(std::string_view(err).substr(stderr_shown_, end - stderr_shown_), '\n'))
    if (!line.empty()) sink.notice("hvdrun: " + link_->label() + ": " + line);
  stderr_shown_ = end + 1;
}

void RemoteHost::join() {
  if (thread_.joinable()) thread_.join();
}

void RemoteHost::close() { link_.reset(); }

// As much of the queued input as the link takes without blocking: a rank 0 that stops
// reading (or an agent that has ended) must never stall this thread, which also reads. And
// no more than kStdinWindow bytes that rank 0 has not taken yet (kStdinTaken): the rest
// waits here, within take()'s bound, not in the agent's memory.
void RemoteHost::send_queued_stdin() {
  constexpr size_t kHeader = 5;  // u32 length | u8 type
  if (stdin_closed_) {  // rank 0's stdin is closed: what comes is read and dropped, as locally
    std::lock_guard<std::mutex> lk(mu_);
    stdin_.clear();
    stdin_bytes_ = 0;
  }
  while (!stdin_closed_) {
    size_t room = link_->write_room();
    if (room <= kHeader) break;
    size_t window = agentwire::kStdinWindow - std::min<uint64_t>(stdin_in_flight_, agentwire::kStdinWindow);
    std::string frame;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stdin_.empty()) break;
      std::string& front = stdin_.front();
      if (!front.empty() && window == 0) break;  // (an empty chunk, the end, always goes)
      size_t n = std::min({front.size(), room - kHeader, window});  // an empty chunk is the end of input
      frame = agentwire::encode(Type::kStdin, std::string_view(front).substr(0, n));
      front.erase(0, n);
      stdin_bytes_ -= n;
      stdin_in_flight_ += n;
      if (front.empty()) stdin_.pop_front();
    }
    if (!link_->write(frame)) break;
  }
  wake_stdin_relay();
}

// The agent's loop, whose stdin relay found no room in take(), once there is.
void RemoteHost::wake_stdin_relay() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!stdin_refused_ || stdin_bytes_ >= kStdinQueued) return;
    stdin_refused_ = false;
  }
  if (agent_) agent_->wake();
}

size_t RemoteHost::take(std::string_view data) {
  std::lock_guard<std::mutex> lk(mu_);
  if (finished_) return data.size();  // the agent has ended: nobody takes it
  if (stdin_bytes_ >= kStdinQueued) {
    stdin_refused_ = true;
    return 0;
  }
  stdin_bytes_ += data.size();
  stdin_.emplace_back(data);
  return data.size();
}

void RemoteHost::end() {
  std::lock_guard<std::mutex> lk(mu_);
  stdin_.emplace_back();
}

void RemoteHost::signal(int sig) {
  std::lock_guard<std::mutex> lk(mu_);
  signals_.push_back(sig);
}

void RemoteHost::wait_signals_sent(double seconds) {
  std::unique_lock<std::mutex> lk(mu_);
  signals_cv_.wait_for(lk, std::chrono::duration<double>(seconds), [this] { return (signals_.empty() && !signals_in_flight_) || finished_.load(); });
}

}  // namespace hvdrun
