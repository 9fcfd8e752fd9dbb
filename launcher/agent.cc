#include "launcher/agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>

#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "launcher/exit_status.h"
#include "launcher/line_splitter.h"

namespace hvdrun {
namespace {

// Ranks time out at about the same moment (their clocks start at the same stall); a rank
// whose neighbour timed out first fails on its closed connection and exits at once.
constexpr double kSilenceWindow = 1.0;

}  // namespace

void block_handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : handled_signals()) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

bool stdin_is_ours_to_read() {
  return fcntl(0, F_GETFD) >= 0 && (!isatty(0) || tcgetpgrp(0) == getpgrp());
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

LocalAgent::LocalAgent(AgentOptions opts, OutputSink& sink, Watchdog* watchdog, ProcessRunner* runner)
    : opts_(opts), sink_(sink), watchdog_(watchdog), runner_(runner ? *runner : system_process_runner()) {
  auto control = WakePipe::open();
  if (!control) throw std::runtime_error(control.error().message);
  control_ = std::move(*control);
}

LocalAgent::~LocalAgent() = default;

void LocalAgent::post(Request r) {
  {
    std::lock_guard<std::mutex> lk(control_mu_);
    requests_.push_back(std::move(r));
  }
  wake();
}

void LocalAgent::request_teardown(std::string message, int exit_code) {
  post(TeardownRequest{std::move(message), exit_code});
}

void LocalAgent::remote_failure(int rank, std::string host, int wait_status) {
  post(FailedWorker{rank, std::move(host), wait_status});
}

void LocalAgent::remote_exited_0(int rank) { post(RankEnded{rank, runner_.now(), false}); }

void LocalAgent::rank_left(int rank) { post(RankEnded{rank, runner_.now(), true}); }

void LocalAgent::rank_lost_peer(int rank, int peer) { post(LostPeer{rank, peer}); }

void LocalAgent::report_silence(int rank, int peer, std::string message) {
  post(SilenceReport{rank, peer, std::move(message)});
}

void LocalAgent::slurm_signal(int sig) { post(SignalRequest{sig, true}); }

void LocalAgent::request_signal(int sig) { post(SignalRequest{sig, false}); }

void LocalAgent::wake() { control_.wake(); }

void LocalAgent::signal_all(int sig) {
  for (auto& w : workers_) {
    if (w.pid <= 0 || w.group_gone) continue;
    // A stopped rank (SIGSTOP, Ctrl-Z) would hold SIGTERM pending until the SIGKILL after
    // the grace: resume it first, so that it ends now.
    if (sig == SIGTERM) runner_.signal_group(w.pid, SIGCONT);
    runner_.signal_group(w.pid, sig);
  }
  for (RemoteControl* r : remotes_) r->signal(sig);
}

void LocalAgent::teardown(const std::string& message, int exit_code) {
  if (tearing_down_) return;
  tearing_down_ = true;
  result_.exit_code = exit_code;
  result_.message = message;
  if (!message.empty()) sink_.notice(message);
  signal_all(SIGTERM);
  kill_deadline_ = runner_.now() + opts_.kill_grace;
}

bool LocalAgent::any_group_alive() {
  forget_ended_groups();
  for (const auto& w : workers_)
    if (w.pid > 0 && !w.group_gone) return true;
  return false;
}

// Groups whose leader was reaped are looked at until they are empty, and then forgotten:
// a rank that ended early left its pid free, and a teardown or the end of the job hours
// later signalled whatever process group had that id by then (another job's rank, a shell).
void LocalAgent::forget_ended_groups() {
  for (auto& w : workers_)
    if (w.pid > 0 && w.exited && !w.group_gone && !runner_.group_alive(w.pid)) {
      w.group_gone = true;
      // The watchdog too: should hvdrun die (SIGKILL, the OOM killer) later in the job, it
      // signalled every group it had ever been told of, this one included, whoever's it
      // was by then.
      if (watchdog_) watchdog_->forget(w.pid);
    }
}

void LocalAgent::reap() {
  // hvdrun is a child subreaper: orphaned grandchildren come here too and are reaped.
  for (auto [pid, st] : runner_.reap()) {
    for (auto& w : workers_) {
      if (w.pid != pid) continue;
      w.exited = true;
      forget_ended_groups();  // at once, before its pid can be given to another process
      if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        note_failure({w.rank, w.host, st});
      else
      {
        exited_0_.emplace(w.rank, runner_.now());
        if (opts_.on_exit0) opts_.on_exit0(w.rank);
      }
      break;
    }
  }
}

// What the other threads asked for (remote hosts' reports, relayed signals, a teardown),
// in the order they asked.
void LocalAgent::take_requests() {
  std::vector<Request> requests;
  {
    std::lock_guard<std::mutex> lk(control_mu_);
    requests.swap(requests_);
  }
  for (auto& r : requests) apply(r);
}

void LocalAgent::apply(Request& r) {
  if (auto* t = std::get_if<TeardownRequest>(&r)) {
    teardown(t->message, t->exit_code);
  } else if (auto* s = std::get_if<SignalRequest>(&r)) {
    if (s->from_slurm) handle_slurm_signal(s->sig);
    else handle_signal(s->sig, true);
  } else if (auto* f = std::get_if<FailedWorker>(&r)) {
    note_failure(std::move(*f));
  } else if (auto* e = std::get_if<RankEnded>(&r)) {
    (e->left ? left_ : exited_0_).emplace(e->rank, e->when);
  } else if (auto* l = std::get_if<LostPeer>(&r)) {
    lost_.emplace(l->rank, l->peer);
  } else if (auto* silence = std::get_if<SilenceReport>(&r); silence && !tearing_down_) {
    silences_.push_back(std::move(*silence));
    if (!silence_at_) silence_at_ = runner_.now() + kSilenceWindow;
  }
}

AgentResult LocalAgent::run(std::vector<WorkerLaunch> launches) {
  UniqueFd sigfd = runner_.open_signals();
  PipeStdinSink rank0_pipe;
  std::optional<StdinRelay> relay;
  spawn_workers(launches, rank0_stdin(rank0_pipe, relay));
  rank0_pipe.close_read_end();
  std::optional<double> drain_deadline;
  while (true) {
    bool all_exited = look_at_ends();
    if (all_exited && job_over(drain_deadline)) break;
    if (kill_deadline_ && runner_.now() >= *kill_deadline_) {
      signal_all(SIGKILL);
      killed_ = true;
      kill_deadline_.reset();
    }
    if (!wait_and_handle(sigfd.get(), relay, all_exited, drain_deadline)) break;
  }
  finish();
  return result_;
}

// Rank 0's stdin: hvdrun's own when it is a file or pipe; relayed through a pipe when it
// is our terminal (the worker is in another process group and may not read the tty); -1:
// none (/dev/null). A remote rank 0's is relayed to its host (relay_stdin_to).
int LocalAgent::rank0_stdin(PipeStdinSink& pipe, std::optional<StdinRelay>& relay) {
  if (remote_stdin_) {
    relay.emplace(stdin_input_, *remote_stdin_);
    return -1;
  }
  if (opts_.rank0_stdin_fd >= 0 || !opts_.stdin_to_rank0 || !stdin_is_ours_to_read()) return opts_.rank0_stdin_fd;
  if (!isatty(0)) return 0;
  if (!pipe.open()) return -1;
  relay.emplace(0, pipe);
  return pipe.read_end();
}

void LocalAgent::spawn_workers(std::vector<WorkerLaunch>& launches, int rank0_stdin) {
  // Children from before the workers (the watchdog, SSH or launch-command clients, srun):
  // never taken for a rank's descendants.
  preexisting_ = runner_.children();
  workers_.reserve(launches.size());
  for (auto& l : launches) {
    l.request.stdin_fd = l.rank == 0 ? rank0_stdin : -1;
    // The child registers itself (before its exec: no moment in which hvdrun could die with
    // the worker unwatched), so nothing here tells the watchdog again.
    l.request.register_fd = watchdog_ ? watchdog_->fd() : -1;
    auto spawned = runner_.spawn(l.request);
    if (!spawned) {
      teardown("hvdrun: rank " + std::to_string(l.rank) + " (host " + l.host + "): " + spawned.error().message,
               exit_code_for(spawned.error()));
      break;
    }
    Worker w;
    w.rank = l.rank;
    w.host = l.host;
    w.pid = spawned->pid;
    w.pipes[0] = std::move(spawned->out);
    w.pipes[1] = std::move(spawned->err);
    workers_.push_back(std::move(w));
  }
}

// The workers' and the remotes' ends, what other threads asked, and the verdicts now due.
// True when every worker here and every remote has ended.
bool LocalAgent::look_at_ends() {
  reap();
  forget_ended_groups();
  bool all_exited = true;
  for (auto& w : workers_) all_exited = all_exited && w.exited;
  for (RemoteControl* r : remotes_) all_exited = all_exited && r->finished();
  // A remote's thread asks (say, for a teardown) before it marks itself finished: what it
  // asked is taken before the loop can end on that mark, not lost with the wake-up.
  take_requests();
  if (silence_at_ && tearing_down_) silence_at_.reset();  // another cause ended the job first
  if (silence_at_ &&
      (all_exited || runner_.now() >= *silence_at_ || silence_accounted(silences_, ended_ranks(), job_size())))
    report_stall_culprit();
  // While silence reports are weighed, the failures they cause wait for that verdict.
  if (report_at_ && !silence_at_ && (tearing_down_ || all_exited || runner_.now() >= *report_at_)) {
    if (tearing_down_)
      report_at_.reset();
    else
      report_failure(!all_exited);
  }
  return all_exited;
}

// Every worker has exited: whatever they left behind is ended (adopted descendants, their
// groups), then their pipes drained. True when nothing is left to wait for.
bool LocalAgent::job_over(std::optional<double>& drain_deadline) {
  bool pipes_open = false;
  for (auto& w : workers_) pipes_open = pipes_open || w.pipes[0].valid() || w.pipes[1].valid();
  if (end_adopted()) return false;  // wait for them (the kill deadline turns SIGTERM into SIGKILL)
  if (any_group_alive()) {
    // Leaders are gone but something they started lingers in a group: end it.
    if (!kill_deadline_ && !killed_) {
      signal_all(SIGTERM);
      kill_deadline_ = runner_.now() + opts_.kill_grace;
    }
    return false;
  }
  if (!pipes_open) return true;
  if (!drain_deadline) drain_deadline = runner_.now() + kDrainAfterExit;
  return runner_.now() >= *drain_deadline;
}

// Descendants that left their rank's group and session (setsid daemons) and were adopted
// by this subreaper when their parents died: they end with the job too. True while any
// is alive.
bool LocalAgent::end_adopted() {
  bool adopted_alive = false;
  for (pid_t c : runner_.children()) {
    if (preexisting_.count(c)) continue;
    bool worker = false;
    for (const auto& w : workers_) worker = worker || w.pid == c;
    if (worker) continue;
    adopted_alive = true;
    if (!adopted_.count(c)) {  // SIGCONT first: a stopped one would hold SIGTERM
      adopted_.insert(c);
      runner_.signal_process(c, SIGCONT);
      runner_.signal_process(c, SIGTERM);
      if (runner_.group_of(c) == c) runner_.signal_group(c, SIGTERM);
      if (!kill_deadline_ && !killed_) kill_deadline_ = runner_.now() + opts_.kill_grace;
    } else if (killed_) {
      runner_.signal_process(c, SIGKILL);
      if (runner_.group_of(c) == c) runner_.signal_group(c, SIGKILL);
    }
  }
  return adopted_alive;
}

// How long the loop may wait: until the next deadline, briefly while the sink is congested
// or lingering groups are polled, a second at most.
int LocalAgent::wait_ms(bool congested, bool all_exited, const std::optional<double>& drain_deadline) {
  double timeout = congested ? 0.005 : 1.0;
  for (const auto& d : {kill_deadline_, drain_deadline, report_at_, silence_at_})
    if (d) timeout = std::min(timeout, *d - runner_.now());
  if (all_exited) timeout = std::min(timeout, 0.02);  // polling lingering groups
  return std::max(0, static_cast<int>(timeout * 1000) + 1);
}

// One wait on the signalfd, the control pipe, the stdin relay and the workers' pipes, and
// what came. False when waiting failed.
bool LocalAgent::wait_and_handle(int sigfd, std::optional<StdinRelay>& relay, bool all_exited,
                                 const std::optional<double>& drain_deadline) {
  std::vector<pollfd> pfds{{sigfd, POLLIN, 0}, {control_.fd(), POLLIN, 0}};
  int relay_idx = -1;
  if (auto want = relay ? relay->wants() : std::nullopt) {
    relay_idx = static_cast<int>(pfds.size());
    pfds.push_back(*want);
  }
  std::vector<std::pair<Worker*, int>> pipe_of;  // pfds index - first_pipe -> (worker, stream)
  size_t first_pipe = pfds.size();
  bool congested = sink_.congested();
  if (!congested)
    for (auto& w : workers_)
      for (int s = 0; s < 2; ++s)
        if (w.pipes[s].valid()) {
          pipe_of.emplace_back(&w, s);
          pfds.push_back({w.pipes[s].get(), POLLIN, 0});
        }
  int n = runner_.wait(pfds.data(), pfds.size(), wait_ms(congested, all_exited, drain_deadline));
  if (n < 0 && errno != EINTR) return false;
  if (n <= 0) return true;
  if (pfds[0].revents & POLLIN) read_signals(sigfd);
  if (pfds[1].revents & POLLIN) {
    control_.drain();
    take_requests();
  }
  if (relay) relay->step(relay_idx >= 0 ? pfds[relay_idx].revents : 0);
  for (size_t i = 0; i < pipe_of.size(); ++i)
    if (pfds[first_pipe + i].revents & (POLLIN | POLLHUP | POLLERR)) read_output(*pipe_of[i].first, pipe_of[i].second);
  return true;
}

void LocalAgent::read_signals(int sigfd) {
  for (auto [sig, sender] : runner_.read_signals(sigfd)) handle_signal(sig, false, sender);
}

void LocalAgent::read_output(Worker& w, int s) {
  char buf[kReadChunk];
  ssize_t r = read(w.pipes[s].get(), buf, sizeof buf);
  StreamKind kind = s == 0 ? StreamKind::kStdout : StreamKind::kStderr;
  if (r > 0) {
    sink_.write_lines(w.rank, kind, w.split[s].feed(std::string_view(buf, static_cast<size_t>(r))));
  } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
    sink_.write_lines(w.rank, kind, w.split[s].flush());
    w.pipes[s].reset();
  }
}

// The loop is over: partial lines still buffered (pipes held open by an escaped process)
// are written, the sink drained, and a teardown asked meanwhile taken.
void LocalAgent::finish() {
  for (auto& w : workers_)
    for (int s = 0; s < 2; ++s)
      if (w.pipes[s].valid())
        sink_.write_lines(w.rank, s == 0 ? StreamKind::kStdout : StreamKind::kStderr, w.split[s].flush());
  sink_.drain();
  // Writing the last of the output can fail too (hvdrun's reader left once the workers had
  // ended, but before their output was written: `hvdrun ... | (sleep 1; head -c 10)`; a
  // full disk under --output-filename): the sink asks for a teardown, and a job that had
  // otherwise succeeded ends with that code and word, not with 0 and output cut short.
  std::optional<TeardownRequest> late;
  {
    std::lock_guard<std::mutex> lk(control_mu_);
    for (auto& r : requests_)
      if (auto* t = std::get_if<TeardownRequest>(&r); t && !late) late = std::move(*t);
    requests_.clear();
  }
  if (late) {
    teardown(late->message, late->exit_code);  // (every group is gone: it signals nobody)
    sink_.drain();
  }
}

}  // namespace hvdrun
