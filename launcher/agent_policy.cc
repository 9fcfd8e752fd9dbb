// LocalAgent's decisions: whom a failure, a silence or a lost peer blames, and what a
// signal to hvdrun (or relayed to an agent) does. The loop and the process mechanics are
// in agent.cc; the tests run these on a fake ProcessRunner (tests/launcher/agent_policy_test.cc).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <limits>
#include <set>

#include "launcher/agent.h"
#include "launcher/exit_status.h"

namespace hvdrun {
namespace {

constexpr double kFailureWindow = 0.1;  // seconds over which simultaneous failures are weighed
// A rank that failed on a peer's closed connection names the peer; that peer's own end
// (exit 0, a failure, a signal) comes from its host's agent, on another path: it is
// waited for this long after the first failure before the verdict is given without it.
constexpr double kLostPeerWait = 2.0;
constexpr double kSignalsSentWait = 1.0;  // seconds for remotes' relays to send a SIGSTOP

}  // namespace

int LocalAgent::job_size() const {
  return rank_hosts_ ? static_cast<int>(rank_hosts_->size()) : static_cast<int>(workers_.size());
}

std::set<int> LocalAgent::ended_ranks() const {
  std::set<int> ended;
  for (const auto& f : failures_) ended.insert(f.rank);
  for (const auto& [rank, when] : exited_0_) ended.insert(rank);
  for (const auto& [rank, when] : left_) ended.insert(rank);
  return ended;
}

// The silence reports weighed: the rank that stalled the job is named, with the report of
// a rank that waited on it.
void LocalAgent::report_stall_culprit() {
  silence_at_.reset();
  int size = job_size();
  int culprit = silent_rank(silences_, ended_ranks(), size);
  // A local rank that is stopped outright is the one (the reports alone cannot tell a
  // stopped rank from a live one waiting for its turn in the ring); not one that reported
  // a time-out itself, which ran.
  std::set<pid_t> stopped = runner_.stopped_groups();
  std::set<int> reported;
  for (const auto& s : silences_) reported.insert(s.rank);
  for (const auto& w : workers_)
    if (w.pid > 0 && !w.exited && !reported.count(w.rank) && stopped.count(w.pid)) {
      culprit = w.rank;
      break;
    }
  const SilenceReport* witness = &silences_.front();
  for (const auto& s : silences_)
    if (s.peer == culprit) {
      witness = &s;
      break;
    }
  std::string msg = "hvdrun: rank " + std::to_string(culprit) + " (host " + rank_host(culprit) +
                    ") made no progress within HVDRUN_TIMEOUT (stopped or hung?); " + std::to_string(silences_.size()) +
                    (silences_.size() == 1 ? " rank" : " ranks") + " timed out waiting: " + witness->message;
  teardown(msg, 1);
}

void LocalAgent::note_failure(FailedWorker f) {
  if (tearing_down_) return;
  // Agent mode: each failure goes to hvdrun at once, to be weighed there with the other
  // hosts' in hvdrun's own window. Held back for this host's window first, a killed rank's
  // report reached hvdrun a window late, after an innocent peer's (on another host, failing
  // on the killed rank's closed connection) had already been named.
  if (opts_.on_failure) opts_.on_failure(f.rank, f.host, f.status);
  failures_.push_back(std::move(f));
  if (!report_at_) {
    first_failure_at_ = runner_.now();
    report_at_ = first_failure_at_ + kFailureWindow;
  }
}

// "was killed by signal 9 (SIGKILL)" or "exited with code 3".
std::string how_it_ended(int status) {
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + signal_name(WTERMSIG(status)) + ")";
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

// A worker killed by a signal closes its sockets a moment before its parent can reap it,
// so its peers may fail and exit first. Failures seen within kFailureWindow of the first
// are weighed together: a signal death is the likelier cause, then the lowest rank (as
// mpirun reports).
void LocalAgent::report_failure(bool can_wait) {
  // Then the rank that left the rendezvous first (its peers fail on its closed connections
  // and exit within the same moment: e.g. its hvd_init failed), then the lowest rank.
  auto left_at = [this](int rank) {
    auto it = left_.find(rank);
    return it == left_.end() ? std::numeric_limits<double>::infinity() : it->second;
  };
  auto better = [&left_at](const FailedWorker& a, const FailedWorker& b) {
    if (WIFSIGNALED(a.status) != WIFSIGNALED(b.status)) return WIFSIGNALED(a.status);
    if (left_at(a.rank) != left_at(b.rank)) return left_at(a.rank) < left_at(b.rank);
    return a.rank < b.rank;
  };
  const FailedWorker& f = *std::min_element(failures_.begin(), failures_.end(), better);
  // Agent mode: hvdrun has every failure (note_failure) and weighs them; a signal death is
  // the cause whatever left before it.
  bool weigh_early = !opts_.on_failure && !WIFSIGNALED(f.status);
  std::optional<int> early;
  if (weigh_early) {
    auto lost = lost_peer_verdict(can_wait);
    if (!lost) return;  // the lost peer's end may still come: asked again shortly
    early = *lost;
  }
  report_at_.reset();
  if (!early) early = left_before_failure();
  if (early && weigh_early) {
    int rank = *early;
    std::string msg = "hvdrun: rank " + std::to_string(rank) + " (host " + rank_host(rank) + ") ";
    msg += exited_0_.count(rank) ? "exited with code 0" : "left the job (its rendezvous connection closed)";
    msg += " while the other ranks still waited on it, without hvd_shutdown; then rank " + std::to_string(f.rank) +
           " (host " + f.host + ") " + how_it_ended(f.status);
    teardown(msg, exit_code::kExitedEarly);
    return;
  }
  if (opts_.on_failure) {
    teardown("", exit_code_of(f.status));
    return;
  }
  teardown("hvdrun: rank " + std::to_string(f.rank) + " (host " + f.host + ") " + how_it_ended(f.status),
           exit_code_of(f.status));
}

// The ranks that failed on a closed connection named the peer they lost: one that exited 0
// or left without failing is the cause, whatever order the hosts' reports came in. The
// outer nullopt: the verdict waits (up to kLostPeerWait after the first failure, unless
// !can_wait) for a lost peer's end to be heard of; report_at_ is set to ask again.
std::optional<std::optional<int>> LocalAgent::lost_peer_verdict(bool can_wait) {
  std::set<int> failed, left, exited_0;
  for (const auto& x : failures_) failed.insert(x.rank);
  for (const auto& [rank, when] : left_) left.insert(rank);
  for (const auto& [rank, when] : exited_0_) exited_0.insert(rank);
  double wait_until = first_failure_at_ + kLostPeerWait;
  bool final = !can_wait || runner_.now() >= wait_until;
  LostPeerVerdict v = lost_peer_culprit(lost_, failed, left, exited_0, final);
  if (v.pending && !final) {
    report_at_ = std::min(runner_.now() + 0.05, wait_until);
    return std::nullopt;
  }
  return std::optional<int>(v.culprit);
}

// A rank that left the job (without hvd_shutdown) before anyone failed, and is not among
// the failures itself, is the likelier cause: its peers fail on its closed connections.
// The first to leave is blamed; unless a rank was killed by a signal, the likeliest cause
// of all (a killed remote rank's connection can close after an innocent peer's, whose own
// failure is still on its way from its host).
std::optional<int> LocalAgent::left_before_failure() const {
  std::optional<std::pair<int, double>> left_first;
  for (const auto& [rank, when] : left_) {
    if (when > first_failure_at_) continue;
    bool failed = std::any_of(failures_.begin(), failures_.end(), [r = rank](const FailedWorker& x) { return x.rank == r; });
    if (!failed && (!left_first || when < left_first->second)) left_first.emplace(rank, when);
  }
  if (!left_first) return std::nullopt;
  return left_first->first;
}

std::string LocalAgent::rank_host(int rank) const {
  for (const auto& w : workers_)
    if (w.rank == rank) return w.host;
  return rank_hosts_ && static_cast<size_t>(rank) < rank_hosts_->size() ? (*rank_hosts_)[rank] : "?";
}

// A signal to hvdrun (from the signalfd), or one the launcher relays to an agent.
void LocalAgent::handle_signal(int sig, bool from_launcher, pid_t sender) {
  if (sig == SIGCHLD) return;  // reaped at the top of the loop
  if (sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGCONT) {
    signal_all(sig);  // SIGCONT: hvdrun was resumed (fg); resume the workers too
    return;
  }
  if (sig == SIGTSTP || sig == SIGSTOP) {  // Ctrl-Z: stop the workers, then ourselves
    // SIGSTOP, not SIGTSTP: the kernel drops SIGTSTP to a group it deems orphaned.
    signal_all(SIGSTOP);
    if (!from_launcher) {
      // A remote host's SIGSTOP leaves on its relay thread, which stops with us: it went
      // only on the SIGCONT, right before that SIGCONT, and remote ranks ran on (each time).
      double until = runner_.now() + kSignalsSentWait;  // one wait for all of them
      for (RemoteControl* r : remotes_) r->wait_signals_sent(std::max(0.0, until - runner_.now()));
      runner_.stop_self();
    }
    return;
  }
  // From the launcher, SIGTERM is its teardown, which this agent may have begun already (a
  // rank here failed): not a second interrupt, and the grace holds (the launcher relays a
  // second interrupt as SIGKILL). Taken for one, it SIGKILLed the ranks on the very host
  // where the failure was, cutting their SIGTERM handlers short.
  if (from_launcher && tearing_down_ && sig != SIGKILL) return;
  // Slurm's SIGTERM only (a cancel or the time limit); other signals from its step daemon
  // (srun forwarding a Ctrl-C, scancel --signal) are the user's, as any other.
  if (!from_launcher && sig == SIGTERM && runner_.sent_by_slurm(sender)) {
    handle_slurm_signal(sig);
    return;
  }
  if (tearing_down_ || sig == SIGKILL) {  // a second interrupt: no more grace
    signal_all(SIGKILL);
    killed_ = true;
    kill_deadline_.reset();
    if (!tearing_down_) {
      tearing_down_ = true;
      result_.exit_code = 128 + SIGKILL;
    }
    result_.interrupted = true;
    return;
  }
  result_.interrupted = true;
  teardown(from_launcher ? "" : "hvdrun: received " + signal_name(sig) + ", terminating the job", 128 + sig);
}

// Slurm ends a cancelled or timed-out job by signalling every process of its steps, the
// ranks before their agent (proctrack walks the tree from its leaves) and the batch step,
// where hvdrun runs, after the others: hvdrun or an agent may see a rank killed by that
// SIGTERM first and be tearing down by the time its own arrives. That is the same event,
// not a second interrupt: it is said (once for the job, by hvdrun) and not escalated to
// SIGKILL, which would cut short the ranks' SIGTERM handlers (a checkpoint); Slurm sends
// SIGKILL itself after its KillWait, and the grace holds here.
void LocalAgent::handle_slurm_signal(int sig) {
  if (opts_.on_slurm_signal) {  // an agent: hvdrun says it
    opts_.on_slurm_signal(sig);
    if (!tearing_down_) teardown("", 128 + sig);
    return;
  }
  std::string msg = "hvdrun: received " + signal_name(sig) +
                    " from Slurm (the job was cancelled or reached its time limit), terminating the job";
  bool say = !slurm_said_;
  slurm_said_ = true;
  result_.interrupted = true;
  if (!tearing_down_)
    teardown(msg, 128 + sig);
  else if (say)
    sink_.notice(msg);
}

}  // namespace hvdrun
