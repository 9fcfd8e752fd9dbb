// Ring alltoallv: store and forward around the ring.
#include <cstring>

#include "collectives/dtype.h"
#include "collectives/ring.h"
#include "collectives/ring_header.h"

namespace hvdrun {

// Step s (1..n-1): rank r sends right every block that started at rank r-s+1 and is going
// at least s hops (to ranks r+1 .. r-s+n), and receives those of rank r-s; it keeps the
// one addressed to itself and forwards the rest at the next step.
Status Ring::alltoallv(const void* sendbuf, void* recvbuf, const std::vector<size_t>& bytes) {
  if (broken_) return broken_error();
  const int n = size_;
  auto b = [&](int src, int dst) { return bytes[static_cast<size_t>(mod(src, n)) * n + mod(dst, n)]; };
  // Where each source's block lands in recv (by source rank).
  std::vector<size_t> recv_off(n + 1, 0);
  for (int src = 0; src < n; ++src) recv_off[src + 1] = recv_off[src] + b(src, rank_);
  std::vector<size_t> send_off(n + 1, 0);
  for (int dst = 0; dst < n; ++dst) send_off[dst + 1] = send_off[dst] + b(rank_, dst);
  const char* in = static_cast<const char*>(sendbuf);
  char* out = static_cast<char*>(recvbuf);
  if (b(rank_, rank_)) std::memcpy(out + recv_off[rank_], in + send_off[rank_], b(rank_, rank_));
  // carry: the blocks of source (r - s + 1) for destinations r+1 .. (r-s+1)+n-1, in order.
  std::string carry, next;
  for (int d = 1; d < n; ++d) carry.append(in + send_off[mod(rank_ + d, n)], b(rank_, rank_ + d));
  for (int s = 1; s < n; ++s) {
    int src = rank_ - s;  // whose blocks arrive now: destinations src+s .. src+n-1 (= r .. )
    size_t recv_len = 0;
    for (int d = s; d < n; ++d) recv_len += b(src, src + d);
    next.resize(recv_len);
    if (auto st = step(carry.data(), carry.size(), next.data(), recv_len, false); !st) return st;
    // The first block (distance s from src) is ours.
    size_t mine = b(src, rank_);
    if (mine) std::memcpy(out + recv_off[mod(src, n)], next.data(), mine);
    carry.assign(next.data() + mine, recv_len - mine);
  }
  return {};
}

}  // namespace hvdrun
