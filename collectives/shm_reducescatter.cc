// The shared-segment reducescatter (hvd_reducescatter through the host's shared segment,
// chosen by Ring::reducescatter, ring_reducescatter.cc).
//
// The host's shared segment (attach_group): piece k holds, for every rank p, the k-th slice
// (slot / n elements) of p's share. Each rank copies its contribution's slices into its
// slot; barrier; each rank reduces its own slice of every slot into recv. Every rank works
// in every piece, and one barrier a piece suffices: a set is written again two pieces
// later, after the next piece's barrier, which a rank reaches only once it has read this one.
#include <cstring>

#include "collectives/reduce_kernels.h"
#include "collectives/ring.h"
#include "collectives/ring_header.h"

namespace hvdrun {

Status Ring::group_reducescatter(const Header& h, const char* in, char* out, const std::vector<size_t>& off,
                                 hvd_dtype_t dtype, hvd_op_t op) {
  if (broken_) return broken_error();
  transport::ShmGroup& g = *group_;
  const int n = size_;
  const size_t es = dtype_size(dtype), slice = g.slot_bytes() / es / n;
  auto slice_len = [&](int p, size_t k) {  // elements of rank p's share in piece k
    const size_t share = off[p + 1] - off[p], lo = std::min(share, k * slice);
    return std::min(slice, share - lo);
  };
  const size_t pieces = std::max<size_t>(1, (off[1] - off[0] + slice - 1) / slice);  // rank 0's share is the widest
  for (size_t k = 0; k < pieces; ++k) {
    const unsigned set = group_calls_++ & 1u;
    std::memcpy(g.note(set, rank_), &h, sizeof h);
    for (int p = 0; p < n; ++p)
      if (size_t len = slice_len(p, k)) std::memcpy(g.slot(set, rank_) + p * slice * es, in + (off[p] + k * slice) * es, len * es);
    if (auto s = group_barrier(); !s) return s;
    if (auto s = check_group_notes(set, h); !s) return s;
    const size_t len = slice_len(rank_, k), at = rank_ * slice * es;
    if (!len) continue;
    char* dst = out + k * slice * es;
    reduce_pair(dst, g.slot(set, 0) + at, g.slot(set, 1) + at, len, dtype, op);
    for (int r = 2; r < n; ++r) reduce_into(dst, g.slot(set, r) + at, len, dtype, op);
    if (op == HVD_OP_AVERAGE) scale_down(dst, len, dtype, n);
  }
  return {};
}

}  // namespace hvdrun
