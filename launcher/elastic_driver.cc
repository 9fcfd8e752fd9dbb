#include "launcher/elastic_driver.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "launcher/agent.h"
#include "launcher/elastic_round.h"
#include "launcher/exit_status.h"
#include "launcher/spawn.h"

namespace hvdrun {

struct ElasticDriver::Proc {
  ElasticSlot slot;
  pid_t pid = -1;
  int rank = -1;  // in the current round; -1: not in it (removed, killed, ended)
  int tag = 0;    // the rank its output is tagged with (its latest)
  int round = 0;  // the round it was spawned into
  bool exited = false;
  int status = 0;
  bool left = false;    // left the rendezvous without hvd_shutdown
  bool killed = false;  // by the driver
  bool group_gone = false;  // exited and its group empty: its id is never signalled again
  bool lost = false;    // its host was lost (its agent dropped or silent): counted as killed
  int registered = 0;   // the newest round it registered in (hvd_init's rendezvous); 0: none
  UniqueFd pipes[2];
  LineSplitter split[2];
  // How it ended, or runs, as a worker of round `round` (elastic_policy.h).
  WorkerEnd end(int round) const {
    if (!exited) return registered == round ? WorkerEnd::kRegistered : WorkerEnd::kRunning;
    if (status != 0) return WorkerEnd::kFailed;
    if (left) return WorkerEnd::kExitedEarly;
    return registered == round ? WorkerEnd::kSucceeded : WorkerEnd::kSucceededEarlier;
  }
};

ElasticDriver::ElasticDriver(ElasticOptions opts, double kill_grace, std::vector<HostSlots> hosts, ElasticDriverIo io,
                             WakePipe wake)
    : opts_(std::move(opts)), kill_grace_(kill_grace), hosts_(std::move(hosts)), io_(std::move(io)),
      blacklist_(opts_.cooldown), wake_(std::move(wake)) {}

ElasticDriver::~ElasticDriver() = default;

bool ElasticDriver::joining(const Proc& p) const { return p.round > settled_round_; }

void ElasticDriver::rank_left(int round, int rank) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    left_.push_back({round, rank});
  }
  wake_.wake();
}

void ElasticDriver::request_end(std::string message, int code) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!end_request_) end_request_.emplace(std::move(message), code);
  }
  wake_.wake();
}

void ElasticDriver::commit_reported(int round, long long commit) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    commits_.emplace_back(round, commit);
  }
  wake_.wake();
}

// Not woken for it: a worker's end, which wakes the loop, comes after its registers (each
// told before its round completes), and the loop takes both in one step; a register alone
// changes a verdict only while a finished worker's round waits (the next turn, <= 1 s).
void ElasticDriver::rank_registered(int round, int rank) {
  std::lock_guard<std::mutex> lk(mu_);
  registered_.push_back({round, rank});
}

int ElasticDriver::run(const std::vector<RankInfo>& first) {
  UniqueFd sigfd = io_.runner.open_signals();
  ElasticRound r;
  r.ranks = first;
  for (const auto& k : first) r.slots.push_back({k.host, k.local_rank});
  begin_round(r, RoundChange{});
  if (io_.discover) next_discovery_ = io_.runner.now() + opts_.discovery_interval;
  while (step()) wait_once(sigfd.get());
  say_reset_line("no commit reported before the job's end");
  for (auto& p : procs_)
    for (int s = 0; s < 2; ++s)
      if (p->pipes[s].valid())
        io_.sink.write_lines(p->tag, s == 0 ? StreamKind::kStdout : StreamKind::kStderr, p->split[s].flush());
  io_.sink.drain();
  return exit_code_;
}

// What came since the last step, and the verdicts now due. False when the job is over.
bool ElasticDriver::step() {
  reap();
  forget_ended_groups();
  take_left();
  if (!ending_) take_opened();
  if (!ending_) check_agents();
  if (!ending_) {
    if (next_discovery_ && io_.runner.now() >= *next_discovery_) poll_discovery();
    open_new_hosts();  // discovered ones, and -H ones whose cooldown ended with their agent gone
    act(judge_round(round_state()));
  }
  if (line_until_ && io_.runner.now() >= *line_until_)
    say_reset_line("no commit reported in " + std::to_string(static_cast<int>(kCommitReportWait)) + " s");
  if (ending_ && all_gone()) return false;
  if (kill_at_ && io_.runner.now() >= *kill_at_) {
    for (auto& p : procs_)
      if (!p->group_gone) io_.runner.signal_group(p->pid, SIGKILL);
    kill_at_.reset();
  }
  return true;
}

// Round `next` begins: its slots' keys, the server's table, the round's key and the update
// that announces it, the ranks of the slots that go on, a process for each slot that has
// none. The slots' keys come first: a worker told of the round by the server (a register
// of an older round, answered kStaleRound) reads its slot's key at once, and a key not
// there yet would read as "removed".
void ElasticDriver::begin_round(const ElasticRound& next, const RoundChange& change) {
  ++round_no_;
  if (round_no_ == 1 || change.ended_round != 0) settled_round_ = round_no_;  // every worker joins it
  StoreEntries keys = round_keys(round_no_, next);
  if (round_no_ > 1) keys.push_back(update_entry(++update_seq_, change));
  const size_t slot_keys = keys.size() - (round_no_ > 1 ? 2 : 1);  // before the round's key and the update
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i == slot_keys) io_.store.begin_round(round_no_, next.ranks);
    if (auto st = io_.store.set(keys[i].first, keys[i].second); !st)
      return fail("hvdrun: elastic: " + st.error().message, 1);
  }
  std::vector<Proc*> live(next.slots.size(), nullptr);
  for (size_t i = 0; i < next.slots.size(); ++i) live[i] = proc_of(next.slots[i]);
  for (auto& p : procs_) p->rank = -1;
  round_ = next;
  for (size_t i = 0; i < next.slots.size() && !ending_; ++i) {
    if (live[i] && !live[i]->exited) {
      live[i]->rank = live[i]->tag = static_cast<int>(i);
      continue;
    }
    spawn(next.slots[i], next.ranks[i]);
  }
}

void ElasticDriver::spawn(const ElasticSlot& slot, const RankInfo& rank) {
  SpawnRequest req = io_.launch(rank, round_no_, slot);
  req.host = slot.host;
  auto spawned = io_.runner.spawn(req);
  if (!spawned)
    return fail("hvdrun: rank " + std::to_string(rank.rank) + " (host " + slot.host + "): " + spawned.error().message,
                exit_code_for(spawned.error()));
  auto p = std::make_unique<Proc>();
  p->slot = slot;
  p->pid = spawned->pid;
  p->rank = p->tag = rank.rank;
  p->round = round_no_;
  p->pipes[0] = std::move(spawned->out);
  p->pipes[1] = std::move(spawned->err);
  procs_.push_back(std::move(p));
}

ElasticDriver::Proc* ElasticDriver::proc_of(const ElasticSlot& slot) const {
  for (const auto& p : procs_)
    if (p->rank >= 0 && p->slot == slot) return p.get();
  return nullptr;
}

void ElasticDriver::reap() {
  for (auto [pid, st] : io_.runner.reap())
    for (auto& p : procs_) {
      if (p->pid != pid || p->exited) continue;
      p->exited = true;
      p->status = st;
      if (st != 0 && p->rank >= 0 && !p->killed && first_failure_.empty())
        first_failure_ = "rank " + std::to_string(p->rank) + " (host " + p->slot.host + ") " + how_it_ended(st);
      if (std::all_of(procs_.begin(), procs_.end(), [](const auto& q) { return q->exited; }))
        drain_at_ = io_.runner.now() + kDrainAfterExit;
    }
}

// Groups whose leader was reaped are looked at until they are empty, then forgotten, here
// and by the watchdog (as the non-elastic agent does: LocalAgent::forget_ended_groups).
void ElasticDriver::forget_ended_groups() {
  for (auto& p : procs_)
    if (p->exited && !p->group_gone && !io_.runner.group_alive(p->pid)) {
      p->group_gone = true;
      if (io_.group_ended) io_.group_ended(p->pid);
    }
}

void ElasticDriver::take_left() {
  std::vector<Left> left, registered;
  std::optional<std::pair<std::string, int>> end;
  std::vector<std::pair<int, long long>> commits;
  {
    std::lock_guard<std::mutex> lk(mu_);
    left.swap(left_);
    registered.swap(registered_);
    end.swap(end_request_);
    commits.swap(commits_);
  }
  for (auto [round, commit] : commits)
    if (line_ && round == line_round_) {
      line_->commit = commit;
      line_->seconds = io_.runner.now() - line_cause_at_;
      say_reset_line("");
    }
  for (auto [round, commit] : commits) settled_round_ = std::max(settled_round_, round);
  auto of_round = [this](const Left& l) -> Proc* {  // (one of an ended round: none)
    if (l.round != round_no_ || l.rank < 0 || l.rank >= static_cast<int>(round_.slots.size())) return nullptr;
    return proc_of(round_.slots[l.rank]);
  };
  for (const auto& l : registered)
    if (Proc* p = of_round(l)) p->registered = l.round;
  for (const auto& l : left)
    if (Proc* p = of_round(l)) p->left = true;
  if (end) fail(end->first, end->second);
}

// The discovery script once more: a failure is a warning (once per message), and the
// hosts it listed last stand.
void ElasticDriver::poll_discovery() {
  next_discovery_ = io_.runner.now() + opts_.discovery_interval;
  auto out = io_.discover();
  DiscoveredHosts d;
  if (out) d = judge_discovery_output(*out, opts_.slots_per_host > 0 ? opts_.slots_per_host : 1,
                                      opts_.discovery_script, opts_.discovery_timeout, false);
  std::string warning = out ? d.verdict.message : out.error().message;
  if (out && d.verdict.use) hosts_ = std::move(d.hosts);
  if (!warning.empty() && warning != last_discovery_warning_) io_.sink.notice("hvdrun: warning: " + warning);
  last_discovery_warning_ = warning;
}

// Each usable remote host has its agent, started in the background: until it runs, no
// round takes the host (opening_), and the loop goes on (a failure elsewhere is acted on).
// Every step: a host is usable again when its cooldown ends, discovered or not.
// A host with a worker not seen to end is left alone: its agent's link may have dropped a
// moment ago, and check_agents loses the host (its workers counted as killed) first. A
// host is started at most once per HVDRUN_DISCOVERY_INTERVAL (an agent that starts, then
// drops, is not started again at every turn of the loop).
void ElasticDriver::open_new_hosts() {
  if (!io_.hosts) return;
  const double now = io_.runner.now();
  for (const auto& h : blacklist_.usable(hosts_, now)) {
    if (!io_.hosts->remote(h.host) || lost_.count(h.host)) continue;  // (a lost one: blacklisted next)
    if (std::any_of(procs_.begin(), procs_.end(), [&](const auto& p) { return p->slot.host == h.host && !p->exited; }))
      continue;
    if (auto it = last_open_.find(h.host); it != last_open_.end() && now < it->second + opts_.discovery_interval)
      continue;
    if (io_.hosts->open(h.host)) opening_.insert(h.host), last_open_[h.host] = now;
  }
}

// The agents' starts that ended: a started one's host may join the next round; a host whose
// agent could not start is blacklisted as a failed one, with a warning.
void ElasticDriver::take_opened() {
  if (!io_.hosts) return;
  for (const auto& o : io_.hosts->opened()) {
    opening_.erase(o.host);
    if (o.status) continue;
    auto cooldown = blacklist_.add(o.host, io_.runner.now(), io_.random ? io_.random() : 0.5);
    io_.sink.notice("hvdrun: warning: elastic: " + o.status.error().message + "; host " + o.host + " blacklisted " +
                    (cooldown ? "for " + std::to_string(static_cast<int>(*cooldown)) + " s" : "for good"));
  }
}

std::vector<HostSlots> ElasticDriver::round_hosts_now() const {
  return round_hosts(hosts_, blacklist_, io_.runner.now(), opening_);
}

// A host whose agent's link dropped, or that was silent past the heartbeat time-out, is
// lost as a dead host is.
void ElasticDriver::check_agents() {
  if (!io_.hosts) return;
  std::set<std::string> hosts;
  for (const auto& p : procs_)
    if (!p->exited && io_.hosts->remote(p->slot.host)) hosts.insert(p->slot.host);
  double now = io_.runner.now(), limit = io_.hosts->heartbeat_timeout();
  agents_due_.reset();
  for (const auto& h : hosts) {
    auto l = io_.hosts->liveness(h);
    if (!l.dropped && now - l.heard <= limit) agents_due_ = std::min(agents_due_.value_or(1e300), l.heard + limit + 0.001);
    if (l.dropped) {
      lose_host(h, "the link to its agent dropped: " + *l.dropped);
    } else if (now - l.heard > limit) {
      lose_host(h, "its agent silent for " + std::to_string(static_cast<int>(now - l.heard + 0.5)) +
                       " s, HVDRUN_HEARTBEAT_TIMEOUT " + std::to_string(static_cast<int>(limit)) + " s");
    }
  }
}

// `host`'s link closed (its agent, if it still runs, ends its workers) and its workers
// counted as killed: the round's verdict blames the host.
void ElasticDriver::lose_host(const std::string& host, const std::string& why) {
  io_.hosts->close(host);
  lost_[host] = why;
  for (auto& p : procs_)
    if (p->slot.host == host && !p->exited) {
      p->exited = p->killed = p->lost = true;
      p->status = SIGKILL;
    }
  if (first_failure_.empty()) first_failure_ = "host " + host + " lost (" + why + ")";
  if (std::all_of(procs_.begin(), procs_.end(), [](const auto& q) { return q->exited; }))
    drain_at_ = io_.runner.now() + kDrainAfterExit;
}

bool ElasticDriver::hosts_changed() const {
  ElasticRound next = next_round(round_.slots, round_hosts_now(), opts_.max_np);
  return next.slots != round_.slots;
}

RoundState ElasticDriver::round_state() const {
  RoundState s;
  for (const auto& slot : round_.slots)
    if (Proc* p = proc_of(slot)) (joining(*p) ? s.joining : s.workers)[slot.host].push_back(p->end(round_no_));
  s.hosts_changed = !waiting_ && hosts_changed();
  s.resets = resets_;
  s.reset_limit = opts_.reset_limit;
  for (const auto& h : hosts_)
    if (blacklist_.blocked(h.host, io_.runner.now())) s.blacklisted.insert(h.host);
  return s;
}

bool ElasticDriver::act(const RoundVerdict& v) {
  switch (v.action) {
    case RoundVerdict::kSucceeded:
      ending_ = true;
      say_unformed_stopped();
      for (auto& p : procs_)  // slots removed but not yet gone, joining workers, those waiting in hvd_init
        if (!p->group_gone) io_.runner.signal_group(p->pid, SIGTERM), p->killed = true;
      kill_at_ = io_.runner.now() + kill_grace_;
      return true;
    case RoundVerdict::kFailed:
      fail("hvdrun: elastic: " + v.message + (first_failure_.empty() ? "" : "; the first failure: " + first_failure_), 1);
      return true;
    case RoundVerdict::kReset:
      return reset(v);
    case RoundVerdict::kGoOn:
      if (waiting_) try_round();
      return false;
    case RoundVerdict::kFinishing:  // no new round: the others of the finished one end
      return false;
  }
  return false;
}

// The workers finished before the current round formed (one that added hosts, or one that
// a failure began while they finished): its workers still running (joining ones, those
// waiting in hvd_init) are stopped: they would wait for the finished ones until the start
// time-out.
void ElasticDriver::say_unformed_stopped() {
  std::string ranks;
  for (const auto& p : procs_)
    if (p->rank >= 0 && !p->exited) ranks += (ranks.empty() ? "" : ",") + std::to_string(p->rank);
  if (ranks.empty()) return;
  say_reset_line("no commit reported before the job's end");
  io_.sink.notice("hvdrun: elastic: the workers finished before round " + std::to_string(round_no_) +
                  " formed; its rank(s) " + ranks + ", which would wait for them, stopped");
}

// The failed hosts blacklisted and their other workers killed; the next round as soon as
// it has --min-np slots.
bool ElasticDriver::reset(const RoundVerdict& v) {
  double now = io_.runner.now();
  if (!cause_at_) cause_at_ = now;
  for (const auto& host : v.blacklist) {
    blacklisted_now_.emplace_back(host, blacklist_.add(host, now, io_.random ? io_.random() : 0.5));
    std::string what;
    kill_host(host, what);
    auto lost = lost_.find(host);
    if (lost != lost_.end()) what = lost->second + (what.empty() ? "" : "; ") + what;
    cause_ += (cause_.empty() ? "" : ", ") + std::string("host ") + host + (lost != lost_.end() ? " lost (" : " failed (") +
              what + ")";
    if (lost != lost_.end()) lost_.erase(lost);
    failure_ = true;
  }
  if (!waiting_) waiting_since_ = now;
  waiting_ = true;
  try_round();
  return true;
}

// Every worker of `host` out of the round: the failed ones named, the others killed.
void ElasticDriver::kill_host(const std::string& host, std::string& what) {
  std::string killed;
  for (auto& p : procs_) {
    if (p->slot.host != host || p->rank < 0) continue;
    std::string rank = std::to_string(p->rank);
    if (!p->exited) {
      io_.runner.signal_group(p->pid, SIGKILL);
      p->killed = true;
      killed += (killed.empty() ? "" : ",") + rank;
    } else if (p->lost) {
      killed += (killed.empty() ? "" : ",") + rank;
    } else if (p->end(round_no_) == WorkerEnd::kExitedEarly) {
      what += (what.empty() ? "" : "; ") + ("rank " + rank + " exited with code 0 without hvd_shutdown");
    } else if (p->end(round_no_) == WorkerEnd::kFailed) {
      what += (what.empty() ? "" : "; ") + ("rank " + rank + " " + how_it_ended(p->status));
    }
    p->rank = -1;
  }
  if (!killed.empty()) what += (what.empty() ? "" : "; ") + ("rank(s) " + killed + " killed");
}

void ElasticDriver::try_round() {
  double now = io_.runner.now();
  ElasticRound next = next_round(round_.slots, round_hosts_now(), opts_.max_np);
  WaitVerdict w = judge_wait(static_cast<long long>(next.slots.size()), opts_.min_np, now - *waiting_since_,
                             opts_.timeout);
  if (w.action == WaitVerdict::kGiveUp)
    return fail("hvdrun: elastic: " + w.message + (first_failure_.empty() ? "" : "; the first failure: " + first_failure_),
                1);
  if (w.action == WaitVerdict::kWait) {
    if (!said_wait_) io_.sink.notice("hvdrun: elastic: " + w.message);
    said_wait_ = true;
    return;
  }
  ResetFacts f;
  f.number = ++resets_;
  f.cause = cause_;
  if (!failure_ && !next.spawned.empty()) f.cause = "hosts added (" + hosts_of(next.spawned) + ")";
  if (!failure_ && !next.removed.empty())
    f.cause += (f.cause.empty() ? "" : ", ") + ("hosts removed (" + hosts_of(next.removed) + ")");
  f.blacklisted = blacklisted_now_;
  f.old_size = static_cast<int>(round_.slots.size());
  f.new_size = static_cast<int>(next.slots.size());
  say_reset_line("no commit reported before the next reset");
  begin_round(next, round_change(next, failure_, round_no_));
  f.seconds = io_.runner.now() - *cause_at_;
  if (!ending_) {  // said when its round's rank 0 reports the commit it restored
    line_ = f;
    line_round_ = round_no_;
    line_cause_at_ = *cause_at_;
    line_until_ = io_.runner.now() + kCommitReportWait;
  }
  waiting_ = failure_ = said_wait_ = false;
  cause_.clear();
  blacklisted_now_.clear();
  waiting_since_.reset();
  cause_at_.reset();
}

// The pending reset line, with its commit, or saying why none (`no_commit`).
void ElasticDriver::say_reset_line(const std::string& no_commit) {
  if (!line_) return;
  if (!line_->commit) line_->no_commit = no_commit;
  io_.sink.notice("hvdrun: " + reset_line(*line_));
  line_.reset();
  line_until_.reset();
}

void ElasticDriver::fail(const std::string& message, int code) {
  if (ending_) return;
  say_reset_line("no commit reported before the job's end");
  exit_code_ = code;
  if (!message.empty()) io_.sink.notice(message);
  end_all();
}

// Every worker still running ends (SIGTERM, SIGKILL after the grace).
void ElasticDriver::end_all() {
  ending_ = true;
  for (auto& p : procs_) {
    if (p->group_gone) continue;
    io_.runner.signal_group(p->pid, SIGCONT);  // a stopped one would hold SIGTERM
    io_.runner.signal_group(p->pid, SIGTERM);
    p->killed = true;
  }
  kill_at_ = io_.runner.now() + kill_grace_;
}

void ElasticDriver::handle_signals(int sigfd) {
  for (auto [sig, sender] : io_.runner.read_signals(sigfd)) {
    if (sig == SIGCHLD || sig == SIGTSTP) continue;  // reaped at the top of the loop; no Ctrl-Z here
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) {
      if (ending_) kill_at_ = io_.runner.now();  // a second one: no more grace
      fail("hvdrun: received " + signal_name(sig) + "; ending the elastic job", 128 + sig);
      continue;
    }
    for (auto& p : procs_)  // SIGUSR1, SIGUSR2, SIGCONT: to the workers
      if (!p->group_gone) io_.runner.signal_group(p->pid, sig);
  }
}

// One wait on the signals, the wake-ups and the workers' output, until the next deadline.
void ElasticDriver::wait_once(int sigfd) {
  std::vector<pollfd> pfds{{sigfd, POLLIN, 0}, {wake_.fd(), POLLIN, 0}};
  std::vector<std::pair<Proc*, int>> pipe_of;
  bool congested = io_.sink.congested();
  if (!congested)
    for (auto& p : procs_)
      for (int s = 0; s < 2; ++s)
        if (p->pipes[s].valid()) {
          pipe_of.emplace_back(p.get(), s);
          pfds.push_back({p->pipes[s].get(), POLLIN, 0});
        }
  double timeout = congested ? 0.005 : 1.0;
  for (const auto& d : {next_discovery_, kill_at_, drain_at_, line_until_, agents_due_})
    if (d) timeout = std::min(timeout, *d - io_.runner.now());
  int n = io_.runner.wait(pfds.data(), pfds.size(), std::max(0, static_cast<int>(timeout * 1000) + 1));
  if (n <= 0) return;
  if (pfds[0].revents & POLLIN) handle_signals(sigfd);
  if (pfds[1].revents & POLLIN) wake_.drain();
  for (size_t i = 0; i < pipe_of.size(); ++i)
    if (pfds[2 + i].revents & (POLLIN | POLLHUP | POLLERR)) read_output(*pipe_of[i].first, pipe_of[i].second);
}

void ElasticDriver::read_output(Proc& p, int s) {
  char buf[kReadChunk];
  ssize_t r = read(p.pipes[s].get(), buf, sizeof buf);
  StreamKind kind = s == 0 ? StreamKind::kStdout : StreamKind::kStderr;
  if (r > 0) {
    io_.sink.write_lines(p.tag, kind, p.split[s].feed(std::string_view(buf, static_cast<size_t>(r))));
  } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
    io_.sink.write_lines(p.tag, kind, p.split[s].flush());
    p.pipes[s].reset();
  }
}

bool ElasticDriver::all_gone() const {
  bool pipes_open = false;
  for (const auto& p : procs_) {
    if (!p->exited) return false;
    pipes_open = pipes_open || p->pipes[0].valid() || p->pipes[1].valid();
  }
  return !pipes_open || (drain_at_ && io_.runner.now() >= *drain_at_);
}

}  // namespace hvdrun
