// Ring collectives over the communicator of collectives/ring_comm.h, one file per
// algorithm: ring_allreduce.cc (the flat ring and its one-pass form for small buffers),
// ring_reducescatter.cc, ring_allgather.cc (allgather, allgatherv), ring_alltoallv.cc,
// ring_broadcast.cc, ring_barrier.cc, ring_hierarchical.cc (over a host's ranks, then
// across hosts), shm_allreduce.cc and shm_reducescatter.cc (through a host's shared
// segment, attached in ring_group.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/ring_comm.h"
#include "common/result.h"
#include "hvdrun/hvdrun.h"
#include "transport/pair.h"
#include "transport/shm_group.h"

namespace hvdrun {

// Which collectives take the hierarchical path (see ring_hierarchical.cc) once a hierarchy
// is attached.
struct HierarchyOptions {
  bool allreduce = false;
  bool allgather = false;
};

// The slot of each rank in the host's shared segment (attach_group) for a pipeline segment
// of `segment_bytes` and `ranks` ranks.
size_t group_slot_bytes(size_t segment_bytes, int ranks);

class Ring : public RingComm {
 public:
  // size 1: no pairs needed.
  using RingComm::RingComm;

  // Attaches the two rings of the hierarchical collectives: `local` joins this host's
  // ranks (shared memory), `cross` the ranks with this local index on every host (TCP).
  // rank_of[c * local_size + l] is the global rank of local index l on host c.
  void set_hierarchy(std::unique_ptr<Ring> local, std::unique_ptr<Ring> cross, std::vector<int> rank_of,
                     HierarchyOptions which);
  const HierarchyOptions& hierarchy() const { return hier_; }

  // Every rank of a job whose ranks all share one host calls it at once (over the ring):
  // rank 0 makes a shared segment of 2 x size x group_slot_bytes() that every rank maps
  // (transport/shm_group.h); from then on allreduces of at most `max_bytes` go through it
  // in one or two barriers instead of 2(n-1) ring steps (shm_allreduce.cc). Where a rank
  // cannot map it, no rank uses it (the ring carries everything) and `why` says why; the
  // result says whether it is attached. An error: the ring itself failed.
  Result<bool> attach_group(const std::string& host, size_t max_bytes, std::string* why);

  // Errors are kMismatch, kTimeout, kPeerLost or kInternal (common/result.h).
  Status allreduce(const void* send, void* recv, size_t count, hvd_dtype_t dtype, hvd_op_t op);
  Status broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root);
  Status allgather(const void* send, void* recv, size_t count, hvd_dtype_t dtype);
  Status barrier();
  // Reducescatter (hvd_reducescatter): the `rows` rows of row_elems elements are reduced
  // over the ring, and rank p receives rows/n rows, one more when p < rows % n, the ranks'
  // shares in rank order. `recv` holds this rank's share; nothing else is written.
  Status reducescatter(const void* send, void* recv, size_t rows, size_t row_elems, hvd_dtype_t dtype, hvd_op_t op);
  // Allgather with per-rank block sizes known to every rank: recv holds the blocks by rank.
  Status allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes_per_rank);
  // Alltoall over the ring (store and forward): bytes[src * size + dst] is what rank src
  // sends rank dst, known to every rank. `send` holds this rank's blocks by destination,
  // `recv` receives the blocks addressed to this rank, by source.
  Status alltoallv(const void* send, void* recv, const std::vector<size_t>& bytes);
  // Closes the pairs, the hierarchy's rings and the shared segment.
  void close(const std::string& reason) override;
  void interrupt() override;  // the hierarchy's rings too, and the shared segment is closed

 private:
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
