// The per-host agent: starts the slots of one host, streams their output line by line to
// an OutputSink, watches their exits, and tears the whole set down on the first failure,
// on a signal to hvdrun, or when asked (request_teardown, from another thread). Local
// hosts run it inside hvdrun; remote hosts run the same code in `hvdrun` agent mode.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/wake_pipe.h"
#include "common/unique_fd.h"
#include "launcher/blame.h"
#include "launcher/line_splitter.h"
#include "launcher/output_sink.h"
#include "launcher/process_runner.h"
#include "launcher/spawn.h"
#include "launcher/stdin_relay.h"
#include "launcher/watchdog.h"

namespace hvdrun {

// The agent's and the elastic driver's reads of the workers' pipes.
inline constexpr size_t kReadChunk = 64 * 1024;
inline constexpr double kDrainAfterExit = 2.0;  // seconds to wait for pipes held open by escaped processes

struct WorkerLaunch {
  int rank = 0;
  std::string host;
  SpawnRequest request;  // stdin_fd is filled in by the agent
};

struct AgentOptions {
  double kill_grace = 5.0;   // seconds between SIGTERM and SIGKILL
  bool stdin_to_rank0 = true;  // hvdrun's stdin goes to rank 0 (when it runs here)
  int rank0_stdin_fd = -1;     // agent mode: rank 0 reads this (a pipe fed from hvdrun's stdin)
  // Agent mode: each failure goes here as it is seen (for hvdrun to weigh with the other
  // hosts') instead of being reported as a line; the teardown is silent.
  std::function<void(int rank, const std::string& host, int wait_status)> on_failure;
  // Agent mode: a rank exited with code 0 (hvdrun names such a rank when it left early).
  std::function<void(int rank)> on_exit0;
  // Agent mode: Slurm signalled this agent (its step's job was cancelled or reached its
  // time limit); hvdrun says so, and the teardown here is silent.
  std::function<void(int sig)> on_slurm_signal;
};

// The workers of another host, run by a remote agent. The agent's loop thread calls these.
class RemoteControl {
 public:
  virtual ~RemoteControl() = default;
  // SIGTERM: tear down (with the grace); SIGKILL: kill now; others: forward to the workers.
  virtual void signal(int sig) = 0;
  // True once the remote agent has ended (every worker there is gone) or the link is lost.
  virtual bool finished() const = 0;
  // Waits up to `seconds` until the signals given so far have left for the agent (before
  // hvdrun stops itself on Ctrl-Z: a stopped hvdrun relays nothing).
  virtual void wait_signals_sent(double seconds) { (void)seconds; }
};

struct AgentResult {
  int exit_code = 0;
  std::string message;  // why the job ended early; "" on success
  bool interrupted = false;  // by a signal to hvdrun (the user's, Slurm's): no --max-restarts
};

// Blocks the signals the agent handles (call first thing in main, before any thread).
void block_handled_signals();
std::string signal_name(int sig);  // "SIGKILL"
// A wait status in words: "was killed by signal 9 (SIGKILL)" or "exited with code 3".
std::string how_it_ended(int status);
// hvdrun's stdin is open, and reading it will not stop hvdrun (a terminal is read only
// when hvdrun is in the foreground).
bool stdin_is_ours_to_read();

class LocalAgent {
 public:
  // `runner`: the processes and the clock (nullptr: the system's; a test's fake otherwise).
  LocalAgent(AgentOptions opts, OutputSink& sink, Watchdog* watchdog, ProcessRunner* runner = nullptr);
  ~LocalAgent();
  LocalAgent(const LocalAgent&) = delete;
  LocalAgent& operator=(const LocalAgent&) = delete;

  // Runs the workers to completion. Every process group is gone when it returns.
  AgentResult run(std::vector<WorkerLaunch> launches);

  // Every rank's host (index = rank), for reports about ranks that run elsewhere.
  void set_rank_hosts(const std::vector<std::string>* hosts) { rank_hosts_ = hosts; }
  // Hosts whose workers run elsewhere: signalled with the local groups, waited for.
  void set_remotes(std::vector<RemoteControl*> remotes) { remotes_ = std::move(remotes); }
  // Rank 0 runs on another host: the loop relays `input` (hvdrun's stdin) to `sink`, its
  // host's stdin queue, instead of to a local rank 0.
  void relay_stdin_to(StdinSink* sink, int input = 0) {
    remote_stdin_ = sink;
    stdin_input_ = input;
  }

  // Thread-safe: tear the job down, report `message` and exit with `exit_code`.
  void request_teardown(std::string message, int exit_code);
  // Thread-safe: a remote worker failed (weighed with the local failures).
  void remote_failure(int rank, std::string host, int wait_status);
  // Thread-safe: a remote rank exited with code 0.
  void remote_exited_0(int rank);
  // Thread-safe: `rank` left the job (its rendezvous connection ended without
  // hvd_shutdown). If others then fail, it is the one blamed.
  void rank_left(int rank);
  // Thread-safe: `rank` failed on its closed connection to `peer` (it said so through the
  // rendezvous before it exited). A peer that exited 0 or left is then the one blamed.
  void rank_lost_peer(int rank, int peer);
  // Thread-safe: `rank` made no progress with `peer` within HVDRUN_TIMEOUT (`message`, its
  // report). Reports are gathered for a moment, then the rank that stalled the job is named
  // (launcher/blame.h) and the job torn down.
  void report_silence(int rank, int peer, std::string message);
  // Thread-safe: Slurm sent `sig` to a remote agent (its kSlurmSignal), as if to hvdrun.
  void slurm_signal(int sig);
  // Thread-safe: act as if hvdrun had received `sig` from the launcher (agent mode).
  void request_signal(int sig);
  // Thread-safe: look at the remotes again (one has finished).
  void wake();

 private:
  struct Worker {
    int rank = 0;
    std::string host;
    pid_t pid = -1;
    bool exited = false;
    // The leader was reaped and nothing was left in its group: the group id is free, and may
    // become another process's (pids wrap, at 32768 on many machines): never signalled again.
    bool group_gone = false;
    UniqueFd pipes[2];  // stdout, stderr read ends
    LineSplitter split[2];
  };
  void teardown(const std::string& message, int exit_code);
  void signal_all(int sig);
  void reap();
  void take_requests();
  // `can_wait`: the verdict may wait for a lost peer's end to be heard of (not once every
  // worker has exited).
  void report_failure(bool can_wait);
  std::optional<std::optional<int>> lost_peer_verdict(bool can_wait);
  std::optional<int> left_before_failure() const;
  bool any_group_alive();
  void forget_ended_groups();
  // The parts of run().
  int rank0_stdin(PipeStdinSink& pipe, std::optional<StdinRelay>& relay);
  void spawn_workers(std::vector<WorkerLaunch>& launches, int rank0_stdin);
  bool look_at_ends();
  bool job_over(std::optional<double>& drain_deadline);
  bool end_adopted();
  int wait_ms(bool congested, bool all_exited, const std::optional<double>& drain_deadline);
  bool wait_and_handle(int sigfd, std::optional<StdinRelay>& relay, bool all_exited, const std::optional<double>& drain_deadline);
  void read_signals(int sigfd);
  void read_output(Worker& w, int stream);
  void finish();

  AgentOptions opts_;
  OutputSink& sink_;
  Watchdog* watchdog_;
  ProcessRunner& runner_;
  std::vector<Worker> workers_;
  WakePipe control_;  // wakes the loop for the requests of other threads
  // What the other threads ask the loop, in the order they asked (one queue, under
  // control_mu_; taken by take_requests).
  struct TeardownRequest {
    std::string message;
    int exit_code;
  };
  struct SignalRequest {
    int sig;
    bool from_slurm;  // an agent's kSlurmSignal; else relayed by the launcher
  };
  struct RankEnded {
    int rank;
    double when;
    bool left;  // left the job (its rendezvous connection closed); else exited with 0
  };
  struct LostPeer {
    int rank, peer;
  };
  struct FailedWorker {
    int rank;
    std::string host;
    int status;
  };
  using Request = std::variant<TeardownRequest, SignalRequest, FailedWorker, RankEnded, LostPeer, SilenceReport>;
  void post(Request r);
  void apply(Request& r);
  std::mutex control_mu_;
  std::vector<Request> requests_;  // under control_mu_
  std::vector<RemoteControl*> remotes_;
  const std::vector<std::string>* rank_hosts_ = nullptr;
  StdinSink* remote_stdin_ = nullptr;  // a remote rank 0's (relay_stdin_to)
  int stdin_input_ = 0;

  bool tearing_down_ = false;
  bool killed_ = false;
  std::optional<double> kill_deadline_;
  std::vector<FailedWorker> failures_;
  std::set<pid_t> preexisting_;  // children of this process before the workers started
  std::set<pid_t> adopted_;      // adopted descendants already sent SIGTERM
  std::map<int, int> lost_;         // ranks that failed on a peer's closed connection -> peer
  std::map<int, double> left_;      // ranks that left without hvd_shutdown -> when
  std::map<int, double> exited_0_;  // local ranks that exited with 0 -> when
  double first_failure_at_ = 0;
  std::string rank_host(int rank) const;
  void note_failure(FailedWorker f);
  // `sender`: the pid that sent it (signalfd says), 0 when relayed by the launcher.
  void handle_signal(int sig, bool from_launcher, pid_t sender = 0);
  void handle_slurm_signal(int sig);
  bool slurm_said_ = false;  // the job's "received SIGTERM from Slurm" is out
  std::optional<double> report_at_;  // when the failures seen so far are reported
  std::vector<SilenceReport> silences_;
  std::optional<double> silence_at_;  // when the silence reports so far are weighed
  void report_stall_culprit();
  std::set<int> ended_ranks() const;
  int job_size() const;  // ranks in the job (every host's), for the silence verdict
  AgentResult result_;
};

}  // namespace hvdrun
