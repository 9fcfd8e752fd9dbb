// The worker's runtime state behind the C API: who this rank is, the rendezvous
// connection, and the data-plane listener. One per process.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <sys/types.h>

#include "common/result.h"
#include "collectives/elastic.h"
#include "collectives/engine/engine.h"
#include "collectives/gpu.h"
#include "collectives/process_sets.h"
#include "collectives/round_device.h"
#include "collectives/timeline.h"
#include "collectives/ring.h"
#include "rendezvous/client.h"
#include "transport/socket_util.h"

namespace hvdrun {

struct RankView {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  std::string host = "localhost";
};

// Errors carry their kind (c_api.cc turns it into HVD_ERR_*). Every collective goes through
// the engine: the async calls submit, the blocking ones submit and wait.
class Runtime {
 public:
  static Runtime& instance();

  Status init();
  Status shutdown();
  bool initialized() const { return initialized_.load(); }
  // A copy, under a lock that no collective holds: never waits for one.
  RankView view() const;

  // Named, asynchronous. Arguments are checked here; the engine checks them across ranks.
  Result<hvd_handle_t> allreduce_async(const char* name, int n, const void* const* sends, void* const* recvs,
                                       const size_t* counts, hvd_dtype_t dtype, hvd_op_t op, double prescale,
                                       double postscale, const char* what = "hvd_allreduce_async",
                                       const hvd_dtype_t* dtypes = nullptr);  // per tensor (dtype ignored)
  Result<hvd_handle_t> broadcast_async(const char* name, void* buf, size_t count, hvd_dtype_t dtype, int root,
                                       const char* what = "hvd_broadcast_async");
  // recv may be null (the handle keeps the output) or hold every rank's rows.
  Result<hvd_handle_t> allgatherv_async(const char* name, const void* send, void* recv, size_t rows, size_t row_elems,
                                        hvd_dtype_t dtype, const char* what = "hvd_allgatherv_async");
  Result<hvd_handle_t> alltoall_async(const char* name, const void* send, size_t rows, size_t row_elems,
                                      const size_t* splits, hvd_dtype_t dtype, const char* what = "hvd_alltoall_async");
  Result<hvd_handle_t> reducescatter_async(const char* name, const void* send, void* recv, size_t rows,
                                           size_t row_elems, hvd_dtype_t dtype, hvd_op_t op,
                                           const char* what = "hvd_reducescatter_async");
  Result<hvd_handle_t> barrier_async(const std::string& name);
  Result<hvd_handle_t> join_async();

  // hvd_next_call: the process set the next collective this thread submits runs in, and
  // its tensors' shapes (Spec::shapes); that call takes them, whether it succeeds or not.
  static Status set_next_call(int process_set, int ntensors, const int* ndims, const long long* dims);
  static void clear_next_call();

  // Process sets (runtime_sets.cc). Every rank of the job adds and removes them, in the
  // same order. `initial`: part of hvd_init's sets (allowed without
  // HVDRUN_DYNAMIC_PROCESS_SETS; a set that exists already is its id, not an error).
  Result<int> add_process_set(const int* ranks, int n, bool initial);
  Status remove_process_set(int id);
  struct SetInfo {
    int rank = -1, size = 0;  // rank: this rank's place in the set, -1 when not a member
    std::vector<int> ranks;
  };
  Result<SetInfo> process_set(int id);
  std::vector<int> process_set_ids();

  int poll(hvd_handle_t h);
  Status wait(hvd_handle_t h);
  Status result_rows(hvd_handle_t h, size_t* rows_per_rank);
  Status wait_result(hvd_handle_t h, void* recv);
  Status join(int* last_joined_rank);

  // A blocking call's turn and name, held while the call runs (until its output is taken).
  // Blocking calls are unnamed: the k-th blocking call of a kind (allreduce, broadcast, ...)
  // in a process pairs with the k-th of that kind on every other rank, as Horovod's unnamed
  // calls do. So a process runs the calls of one kind one at a time, in the order they
  // arrive here (a ticket: first come, first served), whatever threads make them; a call
  // waits for the earlier ones of its kind to finish. Calls of different kinds do not wait
  // for each other. The name is "hvdrun.<kind>", the same for every call of a kind: a
  // program that repeats a call of one shape hits the engine's response cache from the
  // second call on, and one whose shape differs between ranks is a mismatch naming both
  // (not a stall). Threads whose calls must pair with their own counterparts, whatever the
  // threads' timing, name them (the async calls).
  struct BlockingTurns {
    std::string name;
    std::condition_variable cv;
    uint64_t next = 0;     // the next call's ticket
    uint64_t serving = 0;  // the ticket whose call runs
    int waiting = 0;       // calls waiting for their turn
  };
  class BlockingName {
   public:
    BlockingName(Runtime& rt, const char* kind);
    ~BlockingName();
    BlockingName(const BlockingName&) = delete;
    BlockingName& operator=(const BlockingName&) = delete;
    const std::string& name() const { return turns_->name; }

   private:
    Runtime& rt_;
    BlockingTurns* turns_;  // its kind's (a map node: stays put)
  };
  Status barrier();
  Status allreduce(const void* send, void* recv, size_t count, hvd_dtype_t dtype, hvd_op_t op);
  Status broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root);
  Status allgather(const void* send, void* recv, size_t count, hvd_dtype_t dtype);

  // Elastic (runtime_elastic.cc): what hvd_elastic_updates answers; the kind a caller sees
  // (in an elastic job a peer's closed connection is the round's end: kReset).
  ElasticUpdates elastic_updates() const;
  // hvd_elastic_commit: the commit this round starts from, for hvdrun's reset line.
  Status report_commit(long long commit);
  ErrorKind kind_seen(ErrorKind kind) const;

  // Reports a fatal error to hvdrun, which tears the job down with it (best effort).
  void report_fatal(const std::string& message);
  // A rank's host as it registered with the rendezvous ("" when unknown): the engine's
  // stall report names it. Asked once per rank, then kept.
  std::string peer_host(int rank);

  std::mutex& mutex() { return mu_; }

  // A process forked from the one that ran hvd_init inherits the runtime's memory and
  // descriptors (its rings, its rendezvous session) but none of its threads: it must never
  // act on them, or the parent's next collective fails. forked_child() is true there (set
  // by a pthread_atfork handler); owner_pid() is the parent that ran hvd_init.
  bool forked_child() const { return forked_.load(std::memory_order_relaxed); }
  pid_t owner_pid() const { return owner_pid_.load(); }
  // hvd_shutdown in a forked child: this process forgets the parent's runtime, and sends,
  // closes and frees nothing of it (the objects stay as the fork left them).
  void forget_in_child() { initialized_ = false; }

 private:
  static void before_fork();
  static void after_fork_in_parent();
  static void after_fork_in_child();
  std::atomic<bool> forked_{false};
  std::atomic<pid_t> owner_pid_{0};
  std::mutex mu_;  // init, shutdown, and taking the engine
  mutable std::mutex view_mu_;  // also held across fork(), so that a child's copy is free
  std::mutex client_mu_;  // the rendezvous client (engine thread and hvd_init)
  std::atomic<bool> initialized_{false};
  RankView view_;
  std::string secret_;
  std::optional<rdv::Client> client_;
  std::map<int, std::string> peer_hosts_;  // peer_host's answers (under client_mu_)
  rdv::Registered ring_;
  transport::Listener listener_;
  std::unique_ptr<Ring> ring_comm_;
  std::unique_ptr<Timeline> timeline_;
  std::shared_ptr<Engine> engine_;
  RoundDevice gpu_;  // made at the first device collective; aborted when an elastic round ends
  int gpu_generation_ = 0;
  std::mutex blocking_mu_;
  // By kind (never erased): each kind's name and turns, guarded by blocking_mu_.
  std::map<std::string, BlockingTurns, std::less<>> blocking_turns_;
  Status init_alone();
  Result<rdv::Client> connect_rendezvous(const std::string& addr, const std::string& who, std::string* secret);
  Status register_rank(const std::string& addr, const RankView& view);
  // The registered rank's state, kept until hvd_shutdown.
  void adopt(const RankView& view, std::string secret, rdv::Client client, transport::Listener listener,
             const rdv::Registered& reg);
  // Elastic (runtime_elastic.cc): this slot's numbers in the newest round, registered for
  // it; then the watcher, once the ring is up; the watcher's end of the round.
  Status register_elastic(const std::string& addr);
  void start_watcher();
  Status init_elastic(const std::string& addr);
  void end_round(long long seq);
  // The ring and the engine are published under end_mu_ (the watcher runs while hvd_init
  // connects the ring): one published after the round's end is ended at once.
  void publish_ring(std::unique_ptr<Ring> ring);
  void publish_engine(std::shared_ptr<Engine> engine);
  void drop_ring();
  // This hvd_init's name for its store barriers: the same on every rank, and apart from an
  // earlier init's (done in the store): the elastic round ("round3", survivors and new
  // workers alike), else "init<hvd_init calls that succeeded>".
  std::string generation() const;
  std::mutex end_mu_;
  std::optional<Error> round_end_;        // under end_mu_: why the round ended
  std::atomic<bool> round_ended_{false};  // the watcher ended this process's round
  long long elastic_round_ = 0;           // the round this process registered in (0: not elastic)
  ElasticCounters elastic_counters_;
  std::optional<rdv::Client> watch_client_;  // the watcher's connection, until it starts
  std::unique_ptr<ElasticWatcher> watcher_;
  Result<transport::Listener> listen_data_plane(const rdv::Client& client, int rank);
  Status bring_up();
  RingOptions ring_options() const;
  Status connect_ring();
  transport::PairOptions pair_options(double timeout_s) const;
  void report_ring_failures();
  Status attach_host_segment();
  Status start_engine();
  Result<GpuCollectives*> ensure_gpu();
  Result<std::unique_ptr<GpuCollectives>> make_gpu();
  Result<std::shared_ptr<Engine>> engine(const char* what);
  Result<hvd_handle_t> submit(const char* what, Request r);
  EngineOptions engine_options();
  // The engine of a handle's process set, and the engine's own handle.
  Result<std::shared_ptr<Engine>> engine_of(hvd_handle_t h, const char* what);
  Result<hvd_handle_t> submit_in_set(const char* what, int id, Request r);
  // This rank's place and the size of the set the next call runs in (the job's when it is 0
  // or not a set of this rank's: the submission refuses it then).
  std::pair<int, int> next_call_rank_size();
  Result<std::shared_ptr<ProcessSet>> find_set(int id, const char* what);
  void stop_sets();
  Status connect_set(int id, ProcessSet* ps);
  std::mutex sets_mu_;  // sets_ and next_set_id_
  std::map<int, std::shared_ptr<ProcessSet>> sets_;  // the sets other than 0
  int next_set_id_ = 1;
  std::mutex set_changes_mu_;  // one add or remove at a time (they connect and stop rings)
  uint64_t inits_ = 0;         // hvd_init calls that succeeded: generation() outside an elastic job
  // Whether a call's buffers are device memory (both must be on the same side).
  Result<bool> on_device(const char* what, const void* a, const void* b);
};

// The largest allreduce that goes through the host's shared segment, in a one-host job of
// `ranks` (HVDRUN_SHM_ALLREDUCE_BYTES).
size_t shm_allreduce_bytes(int ranks);

// Reads the rank contract from the environment (pure over a getter, for tests; the
// runtime passes tunable_if_set).
Result<RankView> rank_view_from_env(const std::function<std::optional<std::string>(const char*)>& get);

}  // namespace hvdrun
