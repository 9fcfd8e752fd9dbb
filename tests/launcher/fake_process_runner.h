// A ProcessRunner with no processes and a virtual clock, for the agent's policies (teardown,
// signals, blame) to be tested without fork, without sleeps and without wall-clock bounds.
// Time moves only when the agent's loop waits with nothing ready: to the end of its wait,
// or to the next scheduled event (a worker's exit, a test's action) if that comes first.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "launcher/process_runner.h"

namespace hvdrun {

class FakeProcessRunner : public ProcessRunner {
 public:
  // How the n-th spawned worker behaves.
  struct Behaviour {
    double exit_at = -1;       // >= 0: exits by itself then, with exit_status
    int exit_status = 0;       // a wait status (W_EXITCODE(code, 0), or a signal number)
    double term_delay = 0;     // after a SIGTERM it exits this much later (< 0: it ignores it)
    int term_status = SIGTERM;  // with this wait status (a handler's exit(0): 0)
  };
  struct Sent {
    double at;
    pid_t target;  // a group id
    int sig;
  };

  std::vector<Behaviour> behaviours;  // by spawn order; missing: runs until signalled
  std::vector<Sent> sent;             // every signal to a group, in order
  int stopped_self = 0;

  // Runs `action` on the agent's loop thread once the clock reaches `at`.
  void at(double when, std::function<void()> action) { actions_.emplace_back(when, std::move(action)); }

  double now() override { return now_.load(); }

  Result<SpawnedWorker> spawn(const SpawnRequest&) override {
    size_t i = procs_.size();
    pid_t pid = static_cast<pid_t>(1000 + i);
    Proc p;
    p.b = i < behaviours.size() ? behaviours[i] : Behaviour{};
    if (p.b.exit_at >= 0) p.exit_at = p.b.exit_at, p.status = p.b.exit_status;
    procs_[pid] = p;
    SpawnedWorker w;
    w.pid = pid;
    w.out = closed_pipe();
    w.err = closed_pipe();
    return w;
  }
  std::vector<std::pair<pid_t, int>> reap() override {
    std::vector<std::pair<pid_t, int>> out;
    for (auto& [pid, p] : procs_)
      if (!p.reaped && p.exit_at >= 0 && p.exit_at <= now()) {
        p.reaped = true;
        out.emplace_back(pid, p.status);
      }
    return out;
  }
  void signal_group(pid_t pgid, int sig) override {
    sent.push_back({now(), pgid, sig});
    auto it = procs_.find(pgid);
    if (it == procs_.end() || it->second.reaped) return;
    Proc& p = it->second;
    double when = -1;
    int status = 0;
    if (sig == SIGKILL) when = now(), status = SIGKILL;
    if (sig == SIGTERM && p.b.term_delay >= 0) when = now() + p.b.term_delay, status = p.b.term_status;
    if (when >= 0 && (p.exit_at < 0 || when < p.exit_at)) p.exit_at = when, p.status = status;
  }
  void signal_process(pid_t pid, int sig) override { signal_group(pid, sig); }
  bool group_alive(pid_t pgid) override {
    auto it = procs_.find(pgid);
    return it != procs_.end() && !it->second.reaped;
  }
  pid_t group_of(pid_t pid) override { return pid; }
  std::set<pid_t> children() override { return {}; }
  std::set<pid_t> stopped_groups() override { return {}; }
  bool sent_by_slurm(pid_t sender) override { return sender == kSlurmStepd; }
  // A signal to hvdrun from `sender` (FakeProcessRunner::kSlurmStepd: Slurm's), as the
  // signalfd gives it; call from an at() action.
  void deliver(int sig, pid_t sender = 1) {
    signals_.emplace_back(sig, sender);
    char c = 1;
    if (::write(sig_wr_.get(), &c, 1) != 1) std::abort();
  }
  UniqueFd open_signals() override {
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) std::abort();
    sig_wr_.reset(p[1]);
    return UniqueFd(p[0]);
  }
  std::vector<std::pair<int, pid_t>> read_signals(int fd) override {
    char buf[64];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
    return std::exchange(signals_, {});
  }
  void stop_self() override { ++stopped_self; }

  // Nothing ready: the clock moves to the end of the wait or to the next event, whichever
  // comes first (a test that never ends fails, within an hour of virtual time).
  int wait(pollfd* fds, size_t n, int timeout_ms) override {
    int ready = ::poll(fds, n, 0);
    if (ready != 0) return ready;
    double until = now() + timeout_ms / 1000.0;
    for (const auto& [pid, p] : procs_)
      if (!p.reaped && p.exit_at >= 0) until = std::min(until, std::max(now(), p.exit_at));
    auto next = std::min_element(actions_.begin(), actions_.end(),
                                 [](const auto& a, const auto& b) { return a.first < b.first; });
    if (next != actions_.end() && next->first <= until) {
      now_ = std::max(now(), next->first);
      auto action = std::move(next->second);
      actions_.erase(next);
      action();
      return 0;
    }
    now_ = until;
    if (now() > 3600) std::abort();
    return 0;
  }

  static constexpr pid_t kSlurmStepd = 77;

 private:
  struct Proc {
    Behaviour b;
    double exit_at = -1;
    int status = 0;
    bool reaped = false;
  };
  static UniqueFd closed_pipe() {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) std::abort();
    ::close(p[1]);
    return UniqueFd(p[0]);
  }
  std::atomic<double> now_{0};
  UniqueFd sig_wr_;
  std::vector<std::pair<int, pid_t>> signals_;
  std::map<pid_t, Proc> procs_;
  std::vector<std::pair<double, std::function<void()>>> actions_;
};

}  // namespace hvdrun
