// Hierarchical ring collectives.
//
// Hierarchical (Horovod's --hierarchical-allreduce / --hierarchical-allgather), when a
// hierarchy is attached: a `local` ring of this host's ranks (shared memory) and a `cross`
// ring of the ranks with this local index on every host (TCP).
//   allreduce: reduce-scatter on the local ring (local rank l ends with chunk l+1 of L
//     reduced over the host), allreduce of that chunk on the cross ring (the L cross rings
//     run at once, each carrying 1/L of the buffer between hosts), allgather on the local
//     ring. Small buffers: allreduce on the local ring, then on the cross ring.
//   allgather: allgather of this rank's block on the cross ring, then of the C gathered
//     blocks on the local ring, then each block moved to its rank's place.
// Each host sends 2(C-1)/C of the buffer over the network instead of 2(n-1)/n per ring
// link of a flat ring, whose links between hosts carry everything.
//
// The rings are connected and attached by attach_hierarchy (hierarchy.cc).
#include <cstring>

#include "collectives/dtype.h"
#include "collectives/reduce_kernels.h"
#include "collectives/ring.h"
#include "collectives/ring_header.h"

namespace hvdrun {

Status Ring::hierarchical_allreduce(char* buf, size_t count, hvd_dtype_t dtype, hvd_op_t op) {
  if (broken_) return broken_error();
  const size_t es = dtype_size(dtype);
  const hvd_op_t sum_op = op == HVD_OP_AVERAGE ? HVD_OP_SUM : op;  // divided once, by the job's size
  Status st = [&]() -> Status {
    if (count * es <= opts_.small_bytes) {
      if (auto s = local_->allreduce(buf, buf, count, dtype, sum_op); !s) return s;
      if (auto s = cross_->allreduce(buf, buf, count, dtype, sum_op); !s) return s;
      if (op == HVD_OP_AVERAGE) scale_down(buf, count, dtype, size_);
      return {};
    }
    Header h{local_->seq_++, count, -1, kAllreduce, static_cast<uint8_t>(dtype), static_cast<uint8_t>(op), 0};
    if (auto s = local_->check_agreement(h); !s) return s;
    if (auto s = local_->reduce_scatter_steps(buf, count, dtype, sum_op); !s) return s;
    const int L = local_->size_, own = mod(local_->rank_ + 1, L);
    const size_t off = chunk_offset(count, L, own), len = chunk_offset(count, L, own + 1) - off;
    if (auto s = cross_->allreduce(buf + off * es, buf + off * es, len, dtype, sum_op); !s) return s;
    if (op == HVD_OP_AVERAGE) scale_down(buf + off * es, len, dtype, size_);
    return local_->allgather_chunk_steps(buf, count, es);
  }();
  if (!st) return fail(st.error());
  return {};
}

Status Ring::hierarchical_allgather(const void* sendbuf, void* recvbuf, size_t count, hvd_dtype_t dtype) {
  if (broken_) return broken_error();
  const size_t block = count * dtype_size(dtype);
  const int L = local_->size_, C = cross_->size_;
  gather_scratch_.resize(block * (C + static_cast<size_t>(size_)));
  char* across = gather_scratch_.data();              // [host c]: local index l's block of host c
  char* gathered = across + block * C;                // [local index l][host c]
  if (auto s = cross_->allgather(sendbuf, across, count, dtype); !s) return fail(s.error());
  if (auto s = local_->allgather(across, gathered, count * C, dtype); !s) return fail(s.error());
  char* out = static_cast<char*>(recvbuf);
  for (int l = 0; l < L && block; ++l)
    for (int c = 0; c < C; ++c)
      std::memcpy(out + static_cast<size_t>(rank_of_[c * L + l]) * block, gathered + (static_cast<size_t>(l) * C + c) * block,
                  block);
  return {};
}

}  // namespace hvdrun
