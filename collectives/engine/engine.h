// The asynchronous collective engine: one background thread per process that matches
// named requests across ranks, runs them in one order everywhere, fuses small allreduces
// and keeps the agreed responses in a cache. collectives/engine/engine.cc explains the protocol.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>
#include <string_view>

#include "collectives/engine/cycle_message.h"
#include "collectives/engine/eager.h"
#include "collectives/engine/executor.h"
#include "collectives/engine/fusion.h"
#include "collectives/engine/negotiation.h"
#include "collectives/engine/response_cache.h"
#include "collectives/engine/spec.h"
#include "collectives/engine/stall_inspector.h"
#include "common/result.h"
#include "common/tunables.h"
#include "hvdrun/hvdrun.h"

namespace hvdrun {

class Ring;
class GpuCollectives;
class Timeline;
struct PendingOp;  // a request from submit to completion (pending_op.h)

// The CPU of HVDRUN_THREAD_AFFINITY's list for this local rank, as Horovod reads it
// (parse_and_set_affinity: one id per local rank); one id is every rank's. -1: unset or not
// such a list.
int thread_cpu_of(std::string_view list, int local_rank, int local_size);

struct EngineOptions {
  int rank = 0, size = 1;
  int thread_cpu = -1;  // the CPU the background thread is bound to (HVDRUN_THREAD_AFFINITY); -1: none
  // The tunables' defaults (common/tunables.cc); the runtime sets them from the environment.
  double cycle_ms = tunable_default("HVDRUN_CYCLE_TIME");  // pause between cycles that changed nothing
  size_t fusion_bytes = static_cast<size_t>(tunable_default("HVDRUN_FUSION_THRESHOLD"));  // 0: no fusion
  size_t cache_capacity = static_cast<size_t>(tunable_default("HVDRUN_CACHE_CAPACITY"));  // 0: no cache
  // A host allreduce of which each rank receives at most this many bytes from the others
  // (in all, at most 4 times it a cycle) travels with the negotiation message: every rank
  // reduces it from the messages, one exchange and no ring. 0: never (tests of the ring and
  // fusion paths).
  size_t eager_bytes = 64 << 10;
  // How long the background thread keeps off the ring after the last wait() that ran cycles
  // (a loop of blocking calls comes straight back); a request submitted meanwhile that
  // nobody waits for or polls starts at its end at the latest.
  std::chrono::microseconds park_idle{1000};
  double stall_check_s = tunable_default("HVDRUN_STALL_CHECK_TIME_SECONDS");  // 0: off
  double stall_shutdown_s = tunable_default("HVDRUN_STALL_SHUTDOWN_TIME_SECONDS");  // 0: never
  // A rank's host, for the stall report (the runtime's, from the rendezvous); unset: none named.
  std::function<std::string(int rank)> host_of;
  // Device collectives, made on first use (on every rank at the same response).
  std::function<Result<GpuCollectives*>()> gpu;
  // A stall report (one line per name) for hvdrun: rank 0's warning, or any rank's `fatal`
  // report past the shutdown time.
  std::function<void(const std::string& report, bool fatal)> on_stall;
  // A failure that is another rank's doing, for hvdrun's report (the job ends): a rank
  // called hvd_shutdown while this one still waited on it.
  std::function<void(const std::string& message)> on_fatal;
  Timeline* timeline = nullptr;  // optional
};

// Counters for tests and the benchmark.
struct EngineStats {
  uint64_t cycles = 0, cache_hits = 0, cache_misses = 0, cache_invalidations = 0, fused_batches = 0,
           fused_tensors = 0, unfused_tensors = 0, eager = 0;
};

class Engine {
 public:
  // `ring` outlives the engine; the engine's thread is its only user from now on.
  Engine(Ring* ring, EngineOptions opts);
  ~Engine();  // stop("the engine was destroyed")
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Checks the request locally and queues it. Thread-safe. The k-th submission of a name on
  // a rank pairs with the k-th on every other rank, whatever the threads' timing. One
  // submitted while the same name is pending on this rank (an asynchronous operation's name
  // until its handle is waited for, as in Horovod's handle map: whether the earlier one has
  // finished yet is timing, not the program's order) is refused at once
  // (kInvalidArgument), and the refusal takes its turn: the submission each other
  // rank pairs with it fails with the same kind, naming this rank. So every rank reaches
  // the same decision, also when two threads race one name and only some ranks see them
  // overlap.
  Result<hvd_handle_t> submit(Request r);
  // Held around a submit whose caller waits for it right away (the blocking calls): the
  // submit does not wake the background thread, because the caller will run the cycles.
  class CallerWaits {
   public:
    CallerWaits();
    ~CallerWaits();
    CallerWaits(const CallerWaits&) = delete;
    CallerWaits& operator=(const CallerWaits&) = delete;
  };
  Result<hvd_handle_t> join();
  int poll(hvd_handle_t h);  // 1 done, 0 pending, -1 unknown
  // Blocks until done, releases the handle, returns the operation's status.
  Status wait(hvd_handle_t h);
  // Blocks until done; rows received from each rank (kept-output kinds). Keeps the handle.
  Status result_rows(hvd_handle_t h, std::vector<size_t>* rows_per_rank);
  // Blocks until done, copies the kept output (if any) to `recv`, releases the handle.
  Status wait_result(hvd_handle_t h, void* recv);
  // Waits for a join; *last_joined: the rank that joined last. Releases the handle.
  Status wait_join(hvd_handle_t h, int* last_joined);

  // Fails every pending handle with `why`, tells the other ranks this one leaves (so that
  // theirs fail at once, naming it) and stops the thread. Idempotent.
  void stop(const std::string& why);
  // Elastic: the round is over. Every pending and later operation fails with `e` (kReset),
  // whatever error the cycle running now meets (the caller breaks the ring's connections:
  // a transfer in flight fails at once). Thread-safe; returns without waiting for a cycle.
  void end_round(const Error& e);

  EngineStats stats() const;

 private:
  using Op = PendingOp;

  // The steady clock in seconds (the engine's timestamps: submission, cycle end, stalls).
  static double now_s();

  std::shared_ptr<Op> find(hvd_handle_t h);
  // (mu_) Whether a submitted request (not a refusal) is pending under the name whose
  // pending head is `head`.
  bool submitted_pending(const std::string& name, const Op& head) const;
  // (mu_) Whether submit refuses r as a duplicate; head: the name's entry in local_, or null.
  bool name_taken(const Request& r, const Op* head) const;
  // (mu_) The error for a submission of a pending name, whose refusal is queued behind it.
  Error refuse_duplicate(Request r);
  Status wait_done(const std::shared_ptr<Op>& op);
  void release(hvd_handle_t h);
  void background();
  void park();
  // Runs cycles while there is work, holding drive_mu_; returns when `stop_when` holds or
  // nothing is left to do. `block` lets it wait for peers while requests are pending.
  void drive(const std::function<bool()>& stop_when, bool block);
  // 0: nothing to do; 1: local requests to announce; 2: a peer started a cycle.
  int work_now();
  void wait_for_event(int timeout_ms);
  // Tells whichever thread waits for events that local work arrived; `unpark`: and ends the
  // background thread's pause (park()).
  void wake(bool unpark = true);
  Status cycle();
  // This rank's cycle message, framed for allgather_bytes.
  void build_message(std::string* out);
  void collect_requests(CycleMessage* m, std::vector<Op*>* full_ops);
  void mark_announced(CycleMessage* m);
  void write_message(const CycleMessage& m, const std::vector<Op*>& full_ops, std::string* out);
  // Every rank's message of a cycle: negotiates, runs what is ready, keeps it in the cache.
  Status process(const std::vector<std::string>& messages);
  Status check_leaving(const std::vector<CycleMessage>& msgs);
  std::string oldest_pending_name();  // of this rank's requests ("" when none)
  void apply_drops(const NegotiationResult& out);
  void reannounce(const std::string& name);  // (mu_)
  void take_ready(const std::vector<CycleMessage>& msgs, NegotiationResult& out, std::vector<Response>* responses,
                  std::vector<Response>* ran_eagerly);
  bool end_cycle(size_t from_cache);
  void remember(const std::vector<Response>& ran);
  void end_join();
  // Every rank's (prescaled) data of one allreduce is at hand: reduces it in rank order into
  // this rank's op `name` (when it has it) and completes the op.
  void reduce_eagerly(const std::string& name, const Spec& sp, const std::vector<const char*>& data,
                      bool cache_hit = false);
  void execute(std::vector<Response>& responses);
  Status run_single(const Response& r);
  Status run_allreduce_batch(const std::vector<Response>& responses, size_t begin, size_t end);
  Status run_one(const Response& r);
  void complete(const std::string& name, Status s);
  void fail_all(const Error& e);
  void check_stall();

  Ring* ring_;
  EngineOptions opts_;
  int wake_fd_ = -1;                   // eventfd: local work arrived (TCP waits)
  std::atomic<uint32_t> wake_word_{0};  // the same as a futex word (shared-memory waits)
  std::atomic<uint32_t> wake_seen_{0};  // the wake word's value the waiters have seen
  std::atomic<int> event_waiters_{0};   // threads in (or entering) a wait on the word or eventfd

  mutable std::mutex mu_;  // guards ops_, local_, queue_, broken_, stopping_, stats_
  std::condition_variable done_cv_;
  std::unordered_map<hvd_handle_t, std::shared_ptr<Op>> ops_;
  std::unordered_map<std::string, std::shared_ptr<Op>> local_;  // pending, by name
  // (mu_) Later submissions of a name pending in local_ (refusals and the requests after
  // them), in order: the first takes the name's place when it completes.
  std::unordered_map<std::string, std::deque<std::shared_ptr<Op>>> behind_;
  // (mu_) Names of finished asynchronous operations whose handles are not yet waited for,
  // with how many: such a name is still taken (see submit).
  std::unordered_map<std::string, int> held_done_;
  std::vector<std::shared_ptr<Op>> queue_;                      // submitted, not yet announced
  hvd_handle_t next_handle_ = 1;
  std::atomic<bool> broken_{false};  // written under mu_; drive() reads it without
  std::string broken_reason_;
  ErrorKind broken_kind_ = ErrorKind::kPeerLost;
  std::atomic<bool> round_over_{false};  // end_round was called (written under mu_)
  Error round_error_;                    // (mu_) its error: every failure after it is this one
  // (mu_) The peer whose hvd_shutdown ended the collectives ("rank 1 (host b)") and its
  // rank, while this rank had nothing pending: a collective submitted later is the proof
  // that it submitted fewer (reported through on_fatal once).
  std::string peer_left_;
  int peer_left_rank_ = -1;
  bool peer_left_reported_ = false;
  bool stopping_ = false;
  bool leave_sent_ = false;
  EngineStats stats_;

  std::mutex drive_mu_;  // held by whichever thread runs cycles
  std::atomic<int> want_drive_{0};  // threads in wait(): the background thread leaves drive_mu_ to them
  uint64_t drive_releases_ = 0;     // (mu_) counts drive_mu_ handed back, for done_cv_ waiters
  std::condition_variable park_cv_;  // the background thread's pause (park())
  bool parked_ = false;              // (mu_) it is in park()
  bool kicked_ = false;              // (mu_) wake() ended the pause
  std::thread thread_;
  std::atomic<bool> quit_{false};

  // Engine state below: touched only by the thread holding drive_mu_.
  std::shared_ptr<Op> join_op_;
  std::vector<std::string> invalidate_;  // names to announce as invalid
  ResponseCache cache_;
  Negotiation negotiation_;
  NegotiationResult negotiated_;  // the last cycle's (kept: its vectors keep their capacity)
  EagerPlan eager_;
  Executor executor_;
  FusionBuffer fusion_;
  // Scratch that keeps its capacity from cycle to cycle (a loop of small calls allocates less).
  std::vector<uint64_t> bits_scratch_;
  std::vector<std::shared_ptr<Op>> fresh_scratch_;
  std::vector<const char*> eager_ptrs_;
  std::string head_scratch_;                 // build_message's header, before it goes in front of the data
  std::vector<std::string> cycle_msgs_;     // every rank's message of the cycle (framed)
  std::vector<CycleMessage> cycle_parsed_;  // the same, parsed
  std::optional<StallInspector> stall_;  // when HVDRUN_STALL_CHECK_TIME_SECONDS > 0 and on_stall is set
  double last_cycle_end_ = 0;
  bool last_cycle_idle_ = false;  // it ran nothing while requests of ours were announced
  bool announced_ = false;        // the last message left requests of ours known to peers
  uint64_t completions_ = 0, completions_at_message_ = 0;  // under mu_
};

}  // namespace hvdrun
