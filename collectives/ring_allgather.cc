// Ring allgather: the allgather half of the ring allreduce (ring_allreduce.cc), on blocks
// of one size (allgather) or of sizes every rank knows (allgatherv).
#include <cstring>

#include "collectives/dtype.h"
#include "collectives/ring.h"
#include "collectives/ring_header.h"

namespace hvdrun {

Status Ring::allgather(const void* sendbuf, void* recvbuf, size_t count, hvd_dtype_t dtype) {
  if (hier_.allgather && local_) return hierarchical_allgather(sendbuf, recvbuf, count, dtype);
  if (auto s = check_agreement(Header{seq_++, count, -1, kAllgather, static_cast<uint8_t>(dtype), 0, 0}); !s) return s;
  size_t block = count * dtype_size(dtype);
  char* out = static_cast<char*>(recvbuf);
  if (block && out + rank_ * block != sendbuf) std::memmove(out + rank_ * block, sendbuf, block);
  for (int s = 0; s < size_ - 1 && block; ++s) {
    int send_b = mod(rank_ - s, size_), recv_b = mod(rank_ - s - 1, size_);
    if (auto st = step(out + send_b * block, block, out + recv_b * block, block, false); !st) return st;
  }
  return {};
}

Status Ring::allgatherv(const void* sendbuf, void* recvbuf, const std::vector<size_t>& bytes) {
  if (broken_) return broken_error();
  std::vector<size_t> off(size_ + 1, 0);
  for (int r = 0; r < size_; ++r) off[r + 1] = off[r] + bytes[r];
  char* out = static_cast<char*>(recvbuf);
  if (bytes[rank_] && out + off[rank_] != sendbuf) std::memmove(out + off[rank_], sendbuf, bytes[rank_]);
  for (int s = 0; s < size_ - 1; ++s) {
    int send_b = mod(rank_ - s, size_), recv_b = mod(rank_ - s - 1, size_);
    if (auto st = step(out + off[send_b], bytes[send_b], out + off[recv_b], bytes[recv_b], false); !st) return st;
  }
  return {};
}

}  // namespace hvdrun
