// Ring allreduce.
//
// Allreduce = reduce-scatter, then allgather (Patarasuk & Yuan; Gloo's and NCCL's ring):
//   reduce-scatter, step s = 0..n-2: send chunk (r - s), receive chunk (r - s - 1) and
//     reduce it into ours. After n-1 steps rank r holds chunk (r + 1) fully reduced.
//   allgather, step s = 0..n-2: send chunk (r + 1 - s), receive chunk (r - s) in place.
// Each reduced chunk is computed on exactly one rank and copied to the others, so every
// rank ends with bitwise identical results.
//
// Terms (chunks, steps, segments): ring.cc.
#include <cstring>

#include "collectives/dtype.h"
#include "collectives/reduce_kernels.h"
#include "collectives/ring.h"
#include "collectives/ring_header.h"

namespace hvdrun {

// Small buffers: latency, not bandwidth, matters. One ring allgather of (header, whole
// buffer) in n-1 hops instead of 1 + 2(n-1), then every rank reduces all n contributions
// in rank order, so results stay bitwise identical.
Status Ring::small_allreduce(const Header& h, char* buf, size_t count, hvd_dtype_t dtype, hvd_op_t op) {
  const size_t es = dtype_size(dtype), bytes = count * es, block = sizeof(Header) + bytes;
  scratch_.resize(block * size_);
  auto at = [&](int r) { return scratch_.data() + block * r; };
  std::memcpy(at(rank_), &h, sizeof h);
  std::memcpy(at(rank_) + sizeof h, buf, bytes);
  for (int s = 0; s < size_ - 1; ++s) {
    int send_b = mod(rank_ - s, size_), recv_b = mod(rank_ - s - 1, size_);
    if (auto st = step(at(send_b), block, at(recv_b), block, false); !st) return st;
    Header theirs;
    std::memcpy(&theirs, at(recv_b), sizeof theirs);
    if (!(theirs == h)) {
      std::string who = s == 0 ? "its left neighbour " + left_.peer().describe() : "rank " + std::to_string(recv_b);
      return fail(make_error(ErrorKind::kMismatch,
                             "rank " + std::to_string(rank_) + " called " + h.describe() + " but " + who + " called " +
                                 theirs.describe()));
    }
  }
  std::memcpy(buf, at(0) + sizeof h, bytes);
  for (int r = 1; r < size_; ++r) reduce_into(buf, at(r) + sizeof h, count, dtype, op);
  if (op == HVD_OP_AVERAGE) scale_down(buf, count, dtype, size_);
  return {};
}

Status Ring::allreduce(const void* sendbuf, void* recvbuf, size_t count, hvd_dtype_t dtype, hvd_op_t op) {
  const size_t es = dtype_size(dtype);
  Header h{seq_++, count, -1, kAllreduce, static_cast<uint8_t>(dtype), static_cast<uint8_t>(op), 0};
  char* buf = static_cast<char*>(recvbuf);
  // Out of place, the flat ring reads the input where it is (reduce_scatter_steps' `in`):
  // no copy into the output first. The other paths start from a copy.
  const char* in = sendbuf != recvbuf && count ? static_cast<const char*>(sendbuf) : nullptr;
  // Every rank on one host: through the host's shared segment (ring_group.cc).
  if (group_ && size_ > 1 && count * es <= group_max_bytes_)
    return group_allreduce(h, static_cast<const char*>(sendbuf), buf, count, dtype, op);
  // One pass moves n-1 copies of the buffer through each rank, the two-phase ring 2(n-1)/n
  // of it in twice the hops: one pass while those n-1 copies are at most small_bytes.
  const bool one_pass = size_ > 1 && count * es * static_cast<size_t>(size_ - 1) <= opts_.small_bytes;
  const bool flat = !(hier_.allreduce && local_) && size_ > 1 && !one_pass;
  if (in && !flat) std::memcpy(buf, in, count * es);
  if (hier_.allreduce && local_) return hierarchical_allreduce(buf, count, dtype, op);
  if (one_pass) {
    if (broken_) return broken_error();
    return small_allreduce(h, buf, count, dtype, op);
  }
  if (auto s = check_agreement(h); !s) return s;
  if (auto s = reduce_scatter_steps(buf, count, dtype, op, in); !s) return s;
  if (size_ > 1 && count > 0 && op == HVD_OP_AVERAGE) {
    size_t own = chunk_offset(count, size_, mod(rank_ + 1, size_));
    scale_down(buf + own * es, chunk_offset(count, size_, mod(rank_ + 1, size_) + 1) - own, dtype, size_);
  }
  return allgather_chunk_steps(buf, count, es);
}

// Reduce-scatter: after it rank r holds chunk r+1 reduced over the ring.
Status Ring::reduce_scatter_steps(char* buf, size_t count, hvd_dtype_t dtype, hvd_op_t op, const char* in) {
  if (size_ == 1 || count == 0) return {};
  std::vector<size_t> off(size_ + 1);
  for (int c = 0; c <= size_; ++c) off[c] = chunk_offset(count, size_, c);
  const size_t es = dtype_size(dtype);
  return reduce_scatter_chunks(off, 1, [&](int, int c) { return buf + off[c] * es; }, dtype, op, in);
}

// Step s = 0..n-2: send chunk (r + shift - 1 - s), receive chunk (r + shift - 2 - s) and
// reduce it with ours into at(s, chunk). After n-1 steps rank r holds chunk r + shift.
Status Ring::reduce_scatter_chunks(const std::vector<size_t>& off, int shift, const ChunkAt& at, hvd_dtype_t dtype,
                                   hvd_op_t op, const char* in) {
  const int n = size_;
  if (n == 1) return {};
  const size_t es = dtype_size(dtype);
  auto chunk_len = [&](int c) { return off[c + 1] - off[c]; };
  // Received segments land in one segment-sized buffer that stays in cache, and are
  // reduced into the chunk as each one fills.
  const size_t seg = std::max<size_t>(es, opts_.segment_bytes / 8 * 8);
  scratch_.resize(seg);
  for (int s = 0; s < n - 1; ++s) {
    int send_c = mod(rank_ + shift - 1 - s, n), recv_c = mod(rank_ + shift - 2 - s, n);
    char* dst = at(s, recv_c);
    // Each chunk arrives once: out of place, ours comes from `in` (dst = in + received).
    const char* mine = in ? in + off[recv_c] * es : nullptr;
    auto reduce = [&](size_t o, const char* data, size_t len) {
      if (mine)
        reduce_pair(dst + o, mine + o, data, len / es, dtype, op);
      else
        reduce_into(dst + o, data, len / es, dtype, op);
    };
    // Step 0 sends our own contribution; later steps the chunk reduced the step before.
    const char* send = s > 0 ? at(s - 1, send_c) : in ? in + off[send_c] * es : at(-1, send_c);
    auto st = step(
        send, chunk_len(send_c) * es, scratch_.data(), chunk_len(recv_c) * es, false,
        // Calls come at window boundaries (multiples of 8 bytes) and at the end.
        [&](size_t o, size_t len) { reduce(o, scratch_.data() + o % seg, len); }, seg,
        // From a shared-memory ring: reduced where the bytes lie, whole elements at a time.
        reduce, es);
    if (!st) return st;
  }
  return {};
}

// Allgather of the chunks: rank r starts with chunk r+1 and ends with all of them.
Status Ring::allgather_chunk_steps(char* buf, size_t count, size_t es) {
  const int n = size_;
  if (n == 1 || count == 0) return {};
  auto offset = [&](int c) { return chunk_offset(count, n, c); };
  auto chunk_len = [&](int c) { return offset(c + 1) - offset(c); };
  for (int s = 0; s < n - 1; ++s) {
    int send_c = mod(rank_ + 1 - s, n), recv_c = mod(rank_ - s, n);
    auto st = step(buf + offset(send_c) * es, chunk_len(send_c) * es, buf + offset(recv_c) * es,
                   chunk_len(recv_c) * es, false);
    if (!st) return st;
  }
  return {};
}

}  // namespace hvdrun
