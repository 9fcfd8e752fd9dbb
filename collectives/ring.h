// Ring collectives over the two data-plane pairs of a rank: `right` (we send) and `left`
// (we receive). See ring.cc for the algorithms.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/tunables.h"
#include "hvdrun/hvdrun.h"
#include "transport/pair.h"
#include "transport/shm_group.h"

namespace hvdrun {

struct RingOptions {
  // The tunables' defaults (common/tunables.cc); the runtime sets them from the environment.
  double timeout_s = tunable_default("HVDRUN_TIMEOUT");
  int spin_us = static_cast<int>(tunable_default("HVDRUN_SPIN_US"));
  bool spin_yields = true;            // false: this rank has a core of its own (bound, not oversubscribed)
  size_t segment_bytes = static_cast<size_t>(tunable_default("HVDRUN_SEGMENT_BYTES"));
  size_t small_bytes = 64 << 10;     // one-pass allreduce while (n-1) x its bytes are at most this
};

// Which collectives take the hierarchical path (see ring.cc) once a hierarchy is attached.
struct HierarchyOptions {
  bool allreduce = false;
  bool allgather = false;
};

// The slot of each rank in the host's shared segment (attach_group) for a pipeline segment
// of `segment_bytes` and `ranks` ranks.
size_t group_slot_bytes(size_t segment_bytes, int ranks);

class Ring {
 public:
  // size 1: no pairs needed.
  Ring(int rank, int size, transport::Pair right, transport::Pair left, RingOptions opts);

  // Attaches the two rings of the hierarchical collectives: `local` joins this host's
  // ranks (shared memory), `cross` the ranks with this local index on every host (TCP).
  // rank_of[c * local_size + l] is the global rank of local index l on host c.
  void set_hierarchy(std::unique_ptr<Ring> local, std::unique_ptr<Ring> cross, std::vector<int> rank_of,
                     HierarchyOptions which);
  const HierarchyOptions& hierarchy() const { return hier_; }

  // Every rank of a job whose ranks all share one host calls it at once (over the ring):
  // rank 0 makes a shared segment of 2 x size x group_slot_bytes() that every rank maps
  // (transport/shm_group.h); from then on allreduces of at most `max_bytes` go through it
  // in one or two barriers instead of 2(n-1) ring steps (ring_group.cc). Where a rank cannot
  // map it, no rank uses it (the ring carries everything) and `why` says why; the result
  // says whether it is attached. An error: the ring itself failed.
  Result<bool> attach_group(const std::string& host, size_t max_bytes, std::string* why);

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Error codes (Error::code) are HVD_ERR_*.
  Status allreduce(const void* send, void* recv, size_t count, hvd_dtype_t dtype, hvd_op_t op);
  Status broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root);
  Status allgather(const void* send, void* recv, size_t count, hvd_dtype_t dtype);
  Status barrier();
  // Reducescatter (hvd_reducescatter): the `rows` rows of row_elems elements are reduced
  // over the ring, and rank p receives rows/n rows, one more when p < rows % n, the ranks'
  // shares in rank order. `recv` holds this rank's share; nothing else is written.
  Status reducescatter(const void* send, void* recv, size_t rows, size_t row_elems, hvd_dtype_t dtype, hvd_op_t op);

  // Engine-level helpers (collectives/engine.cc). Every rank calls them in the same order.
  // Gathers one byte string from every rank (lengths may differ). Each string begins with
  // kFrameBytes of room for its length (written here, so nothing is copied to frame it): the
  // caller puts its own at (*all)[rank] (all->size() == size), and finds rank r's at
  // (*all)[r], room included. The strings keep their capacity from call to call.
  static constexpr size_t kFrameBytes = 8;
  Status allgather_bytes(std::vector<std::string>* all);
  // Allgather with per-rank block sizes known to every rank: recv holds the blocks by rank.
  Status allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes_per_rank);
  // Alltoall over the ring (store and forward): bytes[src * size + dst] is what rank src
  // sends rank dst, known to every rank. `send` holds this rank's blocks by destination,
  // `recv` receives the blocks addressed to this rank, by source.
  Status alltoallv(const void* send, void* recv, const std::vector<size_t>& bytes);
  // The engine's idle wait: a peer that starts the next cycle sends to its right, so this
  // rank's left pair has data (over TCP or shared memory), or its connection ended.
  bool left_readable();
  // Blocks until left_readable(), `wake_fd` is readable, *wake moved from `seen`, or
  // timeout_ms passes (-1: no limit). Over shared memory it waits on the ring's futex and
  // the wake word together, looking at the TCP connection every 20 ms.
  void wait_left(int wake_fd, std::atomic<uint32_t>* wake, uint32_t seen, int timeout_ms);
  // The same wait for a thread other than the one running the collectives (the engine's
  // background thread, while a caller runs them): it reads none of the reader's state, and
  // close() wakes it and waits for it to let go of the pairs. Over shared memory it returns
  // every 20 ms at most.
  void watch_left(int wake_fd, std::atomic<uint32_t>* wake, uint32_t seen, int timeout_ms);
  // Closes the pairs (and the hierarchy's rings): the neighbours see this rank gone, with
  // `reason` over shared memory. A failed collective does it; so may another thread.
  void close(const std::string& reason);
  // The pairs' sockets (-1 in a job of one), for tests that cut them.
  int left_fd() const { return left_.fd(); }
  int right_fd() const { return right_.fd(); }
  bool broken() const { return broken_; }
  const std::string& broken_reason() const { return broken_reason_; }

  // Called with the message of a mismatch or time-out before the ring is closed, so that
  // hvdrun hears the cause before the neighbours fail on the closed connections.
  std::function<void(const Error&)> on_fatal;
  // Called with the rank whose connection closed (kPeerLost) before the ring is closed and
  // the error returned, so that hvdrun knows whom this rank's failure came from.
  std::function<void(int peer)> on_peer_lost;

 private:
  struct Header;
  std::mutex watch_mu_;  // held by watch_left() while it looks at left_; close() takes it
  std::atomic<bool> closing_{false};  // close() was called: watch_left() returns at once
  std::chrono::steady_clock::time_point last_socket_look_;  // left_readable() beside shared memory
  Status check_agreement(const Header& mine);
  Status step(const char* send, size_t send_len, char* recv, size_t recv_len, bool forward,
              const std::function<void(size_t, size_t)>& on_recv = {}, size_t window = 0,
              const std::function<void(size_t, const char*, size_t)>& on_recv_direct = {}, size_t unit = 1);
  Status run(const transport::TransferSpec& spec);  // a transfer on our pairs; a failure breaks the ring
  Status small_allreduce(const Header& h, char* buf, size_t count, hvd_dtype_t dtype, hvd_op_t op);
  // `in`: this rank's contribution when it is not in `buf` already (out of place); it is
  // read, never written, and buf's chunks are each written once (in + what arrives).
  Status reduce_scatter_steps(char* buf, size_t count, hvd_dtype_t dtype, hvd_op_t op, const char* in = nullptr);
  // The same over chunks [off[c], off[c+1]) (elements; n + 1 offsets), rank r ending with
  // chunk r + shift: step s (0..n-2) reduces the chunk c it receives into at(s, c), and
  // sends from there at step s + 1; at(-1, c): where chunk c lies before (read when `in` is null).
  using ChunkAt = std::function<char*(int step, int chunk)>;
  Status reduce_scatter_chunks(const std::vector<size_t>& off, int shift, const ChunkAt& at, hvd_dtype_t dtype,
                               hvd_op_t op, const char* in);
  Status ring_reducescatter(const Header& h, const char* in, char* out, const std::vector<size_t>& off,
                            hvd_dtype_t dtype, hvd_op_t op);
  Status group_reducescatter(const Header& h, const char* in, char* out, const std::vector<size_t>& off,
                             hvd_dtype_t dtype, hvd_op_t op);
  Status check_group_notes(unsigned set, const Header& h);
  Status allgather_chunk_steps(char* buf, size_t count, size_t es);
  Status hierarchical_allreduce(char* buf, size_t count, hvd_dtype_t dtype, hvd_op_t op);
  Status hierarchical_allgather(const void* send, void* recv, size_t count, hvd_dtype_t dtype);
  Status group_allreduce(const Header& h, const char* in, char* out, size_t count, hvd_dtype_t dtype, hvd_op_t op);
  Status group_barrier();
  Status fail(Error e);
  void wait_on_left(int wake_fd, std::atomic<uint32_t>* wake, uint32_t seen, int timeout_ms, bool watcher);

  int rank_, size_;
  transport::Pair right_, left_;
  RingOptions opts_;
  uint64_t seq_ = 0;
  bool broken_ = false;
  std::string broken_reason_;
  std::vector<char> scratch_;
  std::unique_ptr<Ring> local_, cross_;
  std::vector<int> rank_of_;
  HierarchyOptions hier_;
  std::vector<char> gather_scratch_;
  std::vector<char> chunk_scratch_;  // reducescatter: the chunks passed on, two at a time
  std::unique_ptr<transport::ShmGroup> group_;
  size_t group_max_bytes_ = 0;
  unsigned group_calls_ = 0;  // which of the group's two slot sets the next piece uses
};

}  // namespace hvdrun
