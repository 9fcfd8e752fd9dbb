// Elastic decisions (pure; the driver does the I/O and passes the clock and the random
// numbers in): the discovery script's output, the blacklist with Horovod's cooldown, what
// a round's end means (reset, success or the job's failure, with the reset limit), and the
// wait for --min-np slots. Horovod's rules (horovod/runner/elastic/discovery.py,
// registration.py, driver.py), except where said.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "launcher/hosts.h"

namespace hvdrun {

// The discovery script's standard output: one `host[:slots]` a line (a bare host takes
// `bare_slots`), spaces around it and blank lines ignored. The order of the lines is kept
// (new hosts take ranks in it); a host listed twice is an error, as is a bad line, named
// with its number: "--host-discovery-script 'd.sh': line 3 'h:x': expected host[:slots]".
Result<std::vector<HostSlots>> parse_discovery_output(std::string_view out, int bare_slots, const std::string& script);

// How a run of the discovery script ended, and what the driver does about it: the first
// run must succeed (the job cannot start without hosts); later a failure is a warning and
// the last good list stands. A script still running after HVDRUN_DISCOVERY_TIMEOUT is
// killed and named.
struct DiscoveryRun {
  bool timed_out = false;
  int exit_code = 0;  // 128 + signal when killed by one
  std::string parse_error;  // parse_discovery_output's error, when it exited 0
};
struct DiscoveryVerdict {
  bool fatal = false;   // the job ends with `message`
  bool use = false;     // the new list stands
  std::string message;  // "" when fine; else the warning or the error (one line)
};
DiscoveryVerdict judge_discovery(const DiscoveryRun& run, bool first, const std::string& script, double timeout);

// Failed hosts are blacklisted: for good, or, with a cooldown range (lo, hi), for
// lo * 2^n + u * lo seconds clamped to [lo, hi], n its count of blacklistings (so the first
// is 2-3 lo); a host blacklisted again within its cooldown does not count twice. A host
// whose cooldown is over is taken back when discovery still lists it.
class HostBlacklist {
 public:
  explicit HostBlacklist(std::optional<std::pair<int, int>> cooldown) : cooldown_(cooldown) {}
  // Blacklists `host` at `now` (seconds), `u` in [0, 1). Returns its cooldown in seconds;
  // nullopt: for good.
  std::optional<double> add(const std::string& host, double now, double u);
  bool blocked(const std::string& host, double now) const;
  // The hosts of `hosts` not blocked at `now`, in their order.
  std::vector<HostSlots> usable(const std::vector<HostSlots>& hosts, double now) const;
  int count(const std::string& host) const;

 private:
  struct State {
    int count = 0;
    double until = 0;  // the cooldown's end; blocked for good when no cooldown
  };
  std::optional<std::pair<int, int>> cooldown_;
  std::map<std::string, State> hosts_;
};

// The hosts a new round may take at `now`: those of `hosts` (in their order) that
// `blacklist` does not block and whose agent is not still starting (`opening`: a new
// host's agent starts in the background, and the round goes on without it until it runs).
std::vector<HostSlots> round_hosts(const std::vector<HostSlots>& hosts, const HostBlacklist& blacklist, double now,
                                   const std::set<std::string>& opening);

// How each worker of a round ended (or is still running). kExitedEarly: it exited 0 without
// hvd_shutdown() while others still ran (the runtime tells the driver): a failure.
// kSucceededEarlier: it exited 0 after hvd_shutdown() without having registered in this
// round (it finished in an earlier one, which a failure then ended): this round never forms.
// kRegistered: running, registered in this round (in its hvd_init(), or past it).
enum class WorkerEnd { kRunning, kSucceeded, kFailed, kExitedEarly, kSucceededEarlier, kRegistered };

// What the driver does when a round's worker has ended or membership changed.
struct RoundVerdict {
  // kFinishing: a worker finished; no new round, the others of its round are waited for.
  enum Action { kGoOn, kReset, kSucceeded, kFailed, kFinishing } action = kGoOn;
  std::set<std::string> blacklist;  // hosts to blacklist now (those with a failed worker)
  std::string message;              // kFailed: why (one line)
};

struct RoundState {
  std::map<std::string, std::vector<WorkerEnd>> workers;  // host -> its workers' ends
  // The workers joining a round that only added hosts (no round ended) and has not formed
  // (no commit reported for it): the others may finish without ever joining it.
  std::map<std::string, std::vector<WorkerEnd>> joining;
  bool hosts_changed = false;  // discovery changed the available hosts
  int resets = 0;              // resets so far
  std::optional<int> reset_limit;
  std::set<std::string> blacklisted;  // hosts blocked now (before this verdict)
};

// A worker that exited 0 after hvd_shutdown() (not one joining) has finished: the job is
// done, as in Horovod (one success stops the driver) and torchrun (a succeeded group closes
// the rendezvous). No new round follows (hosts added or removed make none); the others of
// its round are waited for (kFinishing), and if one of them then fails the job fails (a
// finished training is not reset); when none runs, success. A worker that succeeded
// without joining the round (kSucceededEarlier) means the round never forms: its workers
// registered in it would wait in hvd_init for good (Horovod's READY ones, which its driver
// stops once every worker has recorded a state): they are not waited for, and the job has
// succeeded once no other worker of the round runs (the driver stops them). The joining workers are left
// out (the driver stops them at the job's end): the finished workers will never join their
// round. A worker that exited early is a failure (in Horovod one success ends the job: its
// #1994). On failures: every worker failed, or every host of the round blacklisted, or the
// reset limit reached (Horovod's order) ends the job; else the failed hosts are blacklisted
// and the job resets. A membership change alone resets too (the limit counts it).
RoundVerdict judge_round(const RoundState& s);

// Waiting for --min-np slots before a round starts: start when `available` >= min_np;
// else wait, until `waited` reaches the elastic timeout: then fail naming how many slots
// are missing.
struct WaitVerdict {
  enum Action { kStart, kWait, kGiveUp } action = kWait;
  std::string message;  // kWait: the once-said note; kGiveUp: the error
};
WaitVerdict judge_wait(long long available, int min_np, double waited, double timeout);

// --max-restarts (torchrun's, for programs without the elastic API): after a job whose
// workers ran and failed (not one hvdrun was interrupted in, nor one that never started its
// workers: a bad option, a host unreachable), every worker starts again, up to
// `max_restarts` times. `restarts`: those done so far. Returns the line to say, "" for none.
std::string restart_line(bool workers_ran, bool interrupted, int exit_code, int restarts, int max_restarts);

}  // namespace hvdrun
