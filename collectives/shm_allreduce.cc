// The shared-segment allreduce.
//
// Allreduce through the shared memory of one host (a job whose ranks all share it), as
// shared-memory MPI collectives do: the ring needs 2(n-1) steps, each a hand-off between
// neighbours, where every rank can see every other's data at once.
//
// The buffer goes in pieces of at most a slot (HVDRUN_SEGMENT_BYTES within bounds, see
// group_slot_bytes, so that a piece stays in cache); pieces alternate between the group's two sets of slots. For each piece:
//   1. every rank writes its note (the collective's header) and copies its contribution
//      into its slot; barrier; every rank compares every note with its own (a mismatch
//      names the rank that called something else);
//   2. small pieces ((n-1) copies of them at most RingOptions::small_bytes): every rank
//      adds all n contributions in rank order into its output. Done: one barrier.
//   3. otherwise rank r adds every contribution's chunk r into its own slot's chunk r;
//      barrier; every rank copies each reduced chunk from its owner's slot to its output.
// Each element is reduced either on every rank in the same order or once and copied, so
// results are bitwise identical on every rank. A set is written again two pieces later,
// after a barrier every rank reaches only once it has finished reading it; notes are per
// set for the same reason.
#include <cstring>

#include "collectives/reduce_kernels.h"
#include "collectives/ring.h"
#include "collectives/ring_header.h"

namespace hvdrun {

Status Ring::group_allreduce(const Header& h, const char* in, char* out, size_t count, hvd_dtype_t dtype, hvd_op_t op) {
  if (broken_) return broken_error();
  transport::ShmGroup& g = *group_;
  const int n = size_;
  const size_t es = dtype_size(dtype), piece = std::max<size_t>(1, g.slot_bytes() / es);
  size_t off = 0;
  do {
    const size_t c = std::min(piece, count - off), bytes = c * es;
    const unsigned set = group_calls_++ & 1u;
    std::memcpy(g.note(set, rank_), &h, sizeof h);
    if (bytes) std::memcpy(g.slot(set, rank_), in + off * es, bytes);
    if (auto s = group_barrier(); !s) return s;
    if (auto s = check_group_notes(set, h); !s) return s;
    char* dst = out + off * es;
    if (static_cast<size_t>(n - 1) * bytes <= opts_.small_bytes) {
      if (bytes) {
        std::memcpy(dst, g.slot(set, 0), bytes);
        for (int r = 1; r < n; ++r) reduce_into(dst, g.slot(set, r), c, dtype, op);
        if (op == HVD_OP_AVERAGE) scale_down(dst, c, dtype, n);
      }
    } else {
      const size_t lo = chunk_offset(c, n, rank_), len = chunk_offset(c, n, rank_ + 1) - lo;
      char* mine = g.slot(set, rank_) + lo * es;
      for (int r = 0; r < n; ++r)
        if (r != rank_) reduce_into(mine, g.slot(set, r) + lo * es, len, dtype, op);
      if (op == HVD_OP_AVERAGE) scale_down(mine, len, dtype, n);
      if (auto s = group_barrier(); !s) return s;
      for (int r = 0; r < n; ++r) {
        const size_t a = chunk_offset(c, n, r), b = chunk_offset(c, n, r + 1);
        std::memcpy(dst + a * es, g.slot(set, r) + a * es, (b - a) * es);
      }
    }
    off += c;
  } while (off < count);
  return {};
}

}  // namespace hvdrun
