// The elastic driver (issue 28; docs/ELASTIC.md): runs an elastic job's workers round
// after round, on this machine and, through their agents, on other hosts (ElasticHosts). Each worker is a slot (host, index) and keeps its process
// while its slot stays in the job. The decisions are the pure policy's
// (elastic_policy.h: the round's verdict, the blacklist, the wait for --min-np;
// elastic_membership.h: the next round; elastic_round.h: its keys and its line); this
// loop does the I/O: spawning, reaping, the workers' output, the discovery script every
// interval, the store, the signals to hvdrun.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "common/wake_pipe.h"
#include "launcher/discovery_runner.h"
#include "launcher/elastic_hosts.h"
#include "launcher/elastic_membership.h"
#include "launcher/elastic_options.h"
#include "launcher/elastic_policy.h"
#include "launcher/elastic_round.h"
#include "launcher/line_splitter.h"
#include "launcher/output_sink.h"
#include "launcher/process_runner.h"

namespace hvdrun {

// Where the rounds are announced: the rendezvous server (job.cc's adapter) or a test's fake.
class ElasticStore {
 public:
  virtual ~ElasticStore() = default;
  virtual void begin_round(int round, const std::vector<RankInfo>& ranks) = 0;
  virtual Status set(const std::string& key, const std::string& value) = 0;
};

struct ElasticDriverIo {
  ProcessRunner& runner;
  ElasticStore& store;
  OutputSink& sink;
  // One run of the discovery script (unset: the hosts are fixed).
  std::function<Result<DiscoveryOutput>()> discover;
  // The launch of the worker of `slot` spawned into round `round` with `rank`'s numbers.
  std::function<SpawnRequest(const RankInfo& rank, int round, const ElasticSlot& slot)> launch;
  std::function<double()> random;  // in [0, 1): the cooldown's jitter
  // A worker's process group has ended (its leader reaped, nothing left in it): its id may
  // become another process's, which a later clean-up must not signal (the watchdog forgets it).
  std::function<void(pid_t)> group_ended;
  ElasticHosts* hosts = nullptr;    // the remote hosts' agents (unset: this machine only)
};

class ElasticDriver {
 public:
  // `hosts`: the first round's hosts (discovery's first run, or -H); `first`: its ranks.
  // `wake`: what the thread-safe calls below wake its loop with.
  ElasticDriver(ElasticOptions opts, double kill_grace, std::vector<HostSlots> hosts, ElasticDriverIo io,
                WakePipe wake);
  ~ElasticDriver();
  // Runs the job to its end: its exit code. Every worker is gone when it returns.
  int run(const std::vector<RankInfo>& first);
  // Thread-safe (the rendezvous server's callbacks): rank `rank` of round `round` left the
  // job without hvd_shutdown.
  void rank_left(int round, int rank);
  // Thread-safe: end the job (a start time-out, the output failing): `message`, `code`.
  void request_end(std::string message, int code);
  // Thread-safe (the server's callback): rank 0 of round `round` starts it from `commit`.
  void commit_reported(int round, long long commit);
  // Thread-safe (the server's callback): rank `rank` registered in round `round` (its hvd_init).
  void rank_registered(int round, int rank);

 private:
  struct Proc;
  struct Left {
    int round, rank;
  };
  bool step();
  void begin_round(const ElasticRound& next, const RoundChange& change);
  void spawn(const ElasticSlot& slot, const RankInfo& rank);
  void reap();
  void forget_ended_groups();
  void take_left();
  void poll_discovery();
  void open_new_hosts();
  void take_opened();
  std::vector<HostSlots> round_hosts_now() const;
  void check_agents();
  void lose_host(const std::string& host, const std::string& why);
  bool hosts_changed() const;
  RoundState round_state() const;
  bool act(const RoundVerdict& v);
  void say_unformed_stopped();
  bool reset(const RoundVerdict& v);
  void kill_host(const std::string& host, std::string& killed);
  void try_round();
  void say_reset_line(const std::string& no_commit);
  void fail(const std::string& message, int code);
  void handle_signals(int sigfd);
  void wait_once(int sigfd);
  void read_output(Proc& p, int stream);
  bool all_gone() const;
  void end_all();
  Proc* proc_of(const ElasticSlot& slot) const;

  ElasticOptions opts_;
  double kill_grace_;
  std::vector<HostSlots> hosts_;  // discovery's latest good list (or -H)
  ElasticDriverIo io_;
  HostBlacklist blacklist_;
  std::vector<std::unique_ptr<Proc>> procs_;
  ElasticRound round_;
  int round_no_ = 0;
  // The newest round every worker of which joins (round 1, one that ended the round before,
  // one whose rank 0 reported its commit): a worker spawned into a later one is joining
  // (RoundState::joining), and workers that finish before it forms never join it.
  int settled_round_ = 0;
  // Spawned into a round later than settled_round_ (RoundState::joining).
  bool joining(const Proc& p) const;
  long long update_seq_ = 0;
  int resets_ = 0;
  std::optional<double> next_discovery_, waiting_since_, kill_at_, cause_at_;
  std::string first_failure_;
  bool said_wait_ = false;
  bool ending_ = false;
  int exit_code_ = 0;
  WakePipe wake_;
  std::mutex mu_;
  std::vector<Left> left_;        // under mu_
  std::vector<Left> registered_;  // under mu_: (round, rank) registered
  std::optional<std::pair<std::string, int>> end_request_;  // under mu_
  std::vector<std::pair<int, long long>> commits_;          // under mu_: (round, commit) reported
  std::optional<ResetFacts> line_;  // the last reset's line, said once its commit is known
  int line_round_ = 0;
  double line_cause_at_ = 0;
  std::optional<double> line_until_;
  bool waiting_ = false;  // a new round is due, waiting for --min-np slots
  bool failure_ = false;  // the due round follows a failure
  std::string cause_;     // what made the due round
  std::vector<std::pair<std::string, std::optional<double>>> blacklisted_now_;
  std::optional<double> drain_at_;
  std::string last_discovery_warning_;
  std::optional<double> agents_due_;  // when the quietest agent's silence would lose its host
  std::map<std::string, std::string> lost_;  // host -> why it was lost (its agent dropped or silent)
  std::set<std::string> opening_;  // the new hosts whose agent is being started (no round takes them yet)
  std::map<std::string, double> last_open_;  // when each host's agent was last started
};

}  // namespace hvdrun
