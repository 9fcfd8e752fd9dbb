// Reducescatter (hvd_reducescatter): every rank's rows reduced, rank p keeping its share.
//
// Ring: the chunks are the ranks' shares (chunk p: rank p's rows), and the steps those of
// the allreduce's first half (ring_allreduce.cc) turned by one chunk so that rank p ends with chunk p:
// step s = 0..n-2 sends chunk (p - 1 - s) and receives chunk (p - 2 - s), reduced with its
// own contribution. Each rank sends (n-1)/n of the buffer, half of what an allreduce sends.
// The chunks passed on are reduced into two share-sized buffers taken in turn; the last
// step reduces straight into recv.
//
// The host's shared segment: shm_reducescatter.cc.
//
// With a hierarchy attached the flat ring runs. A hierarchical form (a reduce-scatter on
// the host, then one across hosts per local index) would send (C-1)/C of the buffer out of
// each of C hosts where the flat ring sends (n-1)/n (at most twice as much), but the shares
// are the global ranks' rows, scattered over the local chunks: it needs a copy of the input
// in (local index, host) order first.
#include <cstring>

#include "collectives/reduce_kernels.h"
#include "collectives/ring.h"
#include "collectives/ring_header.h"

namespace hvdrun {

Status Ring::reducescatter(const void* sendbuf, void* recvbuf, size_t rows, size_t row_elems, hvd_dtype_t dtype,
                           hvd_op_t op) {
  const int n = size_;
  const size_t es = dtype_size(dtype);
  std::vector<size_t> off(n + 1, 0);  // elements: rank p's share is [off[p], off[p + 1])
  for (int p = 0; p < n; ++p)
    off[p + 1] = off[p] + (rows / n + (static_cast<size_t>(p) < rows % n ? 1 : 0)) * row_elems;
  Header h{seq_++, rows, static_cast<int32_t>(row_elems), kReducescatter, static_cast<uint8_t>(dtype),
           static_cast<uint8_t>(op), 0};
  const char* in = static_cast<const char*>(sendbuf);
  char* out = static_cast<char*>(recvbuf);
  const size_t mine = (off[rank_ + 1] - off[rank_]) * es;
  // recv within the input (in place): the steps read the input to the end, so the share is
  // reduced aside and copied at the end.
  const bool overlap = mine && out < in + off[n] * es && in < out + mine;
  std::vector<char> aside(overlap ? mine : 0);
  char* dst = overlap ? aside.data() : out;
  const bool through_group = group_ && n > 1 && off[n] * es <= group_max_bytes_ && group_->slot_bytes() / es >= size_t(n);
  Status st = through_group ? group_reducescatter(h, in, dst, off, dtype, op) : ring_reducescatter(h, in, dst, off, dtype, op);
  if (st && overlap) std::memcpy(out, aside.data(), mine);
  return st;
}

Status Ring::ring_reducescatter(const Header& h, const char* in, char* out, const std::vector<size_t>& off,
                                hvd_dtype_t dtype, hvd_op_t op) {
  if (auto s = check_agreement(h); !s) return s;
  const int n = size_;
  const size_t es = dtype_size(dtype), mine = off[rank_ + 1] - off[rank_];
  if (n == 1) {
    if (mine) std::memcpy(out, in, mine * es);
    return {};
  }
  size_t widest = 0;
  for (int p = 0; p < n; ++p) widest = std::max(widest, off[p + 1] - off[p]);
  const size_t half = widest * es;
  if (n > 2 && chunk_scratch_.size() < 2 * half) chunk_scratch_.resize(2 * half);
  auto at = [&](int s, int) { return s == n - 2 ? out : chunk_scratch_.data() + (s & 1) * half; };
  if (auto s = reduce_scatter_chunks(off, 0, at, dtype, op, in); !s) return s;
  if (op == HVD_OP_AVERAGE && mine) scale_down(out, mine, dtype, n);
  return {};
}

}  // namespace hvdrun
