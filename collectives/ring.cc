// Ring collectives.
//
// Terms. n ranks sit on a ring; each sends only to its right neighbour (rank + 1) and
// receives only from its left (rank - 1), both at once. A buffer of `count` elements is cut
// into n *chunks* (chunk c is the c-th n-th of the buffer, the first ones one element longer
// when count % n != 0). Data moves in *steps*: in one step every rank sends one chunk and
// receives one chunk. Within a step the bytes arrive in *segments* (HVDRUN_SEGMENT_BYTES),
// each reduced as soon as it has arrived, while the rest is still on the wire: sending,
// receiving and reducing overlap.
//
// Allreduce = reduce-scatter, then allgather (Patarasuk & Yuan; Gloo's and NCCL's ring):
//   reduce-scatter, step s = 0..n-2: send chunk (r - s), receive chunk (r - s - 1) and
//     reduce it into ours. After n-1 steps rank r holds chunk (r + 1) fully reduced.
//   allgather, step s = 0..n-2: send chunk (r + 1 - s), receive chunk (r - s) in place.
// Each reduced chunk is computed on exactly one rank and copied to the others, so every
// rank ends with bitwise identical results.
//
// Broadcast: a pipelined chain root -> root+1 -> ... -> root-1; each rank forwards the
// bytes it has received as they arrive. Allgather: the allgather half of the ring.
// Reducescatter: the reduce-scatter half, chunked by the ranks' shares (ring_reducescatter.cc).
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
// A job whose ranks all share one host may attach the host's shared segment (attach_group):
// allreduces then go through it in one or two barriers instead of ring steps (ring_group.cc).
//
// Before each collective, every rank sends a small header (sequence number, kind, count,
// dtype, op, root) to its right and compares the one from its left with its own: ranks
// that disagree fail with both calls named instead of reducing garbage or hanging.
#include "collectives/ring.h"

#include <poll.h>

#include <chrono>
#include <cstring>

#include "collectives/dtype.h"
#include "collectives/reduce_kernels.h"
#include "collectives/ring_header.h"

namespace hvdrun {

Ring::Ring(int rank, int size, transport::Pair right, transport::Pair left, RingOptions opts)
    : rank_(rank), size_(size), right_(std::move(right)), left_(std::move(left)), opts_(opts) {}

void Ring::set_hierarchy(std::unique_ptr<Ring> local, std::unique_ptr<Ring> cross, std::vector<int> rank_of,
                         HierarchyOptions which) {
  local_ = std::move(local);
  cross_ = std::move(cross);
  rank_of_ = std::move(rank_of);
  hier_ = which;
}

void Ring::close(const std::string& reason) {
  closing_ = true;
  left_.interrupt();
  std::lock_guard<std::mutex> g(watch_mu_);
  right_.close(reason);
  left_.close(reason);
  if (local_) local_->close(reason);
  if (cross_) cross_->close(reason);
  if (group_) group_->close(reason);
}

Status Ring::fail(Error e) {
  // A failed transfer leaves the ring in an unknown state: close it (and the hierarchy's
  // rings) so that the neighbours fail fast too, and refuse every later call with the
  // first reason.
  broken_ = true;
  broken_reason_ = e.message;
  if (on_fatal && (e.code == HVD_ERR_MISMATCH || e.code == HVD_ERR_TIMEOUT)) on_fatal(e);
  if (on_peer_lost && e.kind == ErrorKind::kPeerLost && e.peer_rank >= 0) on_peer_lost(e.peer_rank);
  close(e.message);
  return e;
}

Status Ring::step(const char* send, size_t send_len, char* recv, size_t recv_len, bool forward,
                  const std::function<void(size_t, size_t)>& on_recv, size_t window,
                  const std::function<void(size_t, const char*, size_t)>& on_recv_direct, size_t unit) {
  transport::TransferSpec spec;
  spec.send = send;
  spec.send_len = send_len;
  spec.recv = recv;
  spec.recv_len = recv_len;
  spec.send_follows_recv = forward;
  spec.notify_bytes = window ? window : opts_.segment_bytes;
  spec.on_recv = on_recv;
  spec.recv_window = window;
  spec.on_recv_direct = on_recv_direct;
  spec.direct_unit = unit;
  return run(spec);
}

Status Ring::run(const transport::TransferSpec& spec) {
  auto s = transport::transfer(&right_, &left_, spec, opts_.timeout_s, opts_.spin_us, opts_.spin_yields);
  if (!s)
    return fail(Error{s.error().message, s.error().kind == ErrorKind::kTimeout ? HVD_ERR_TIMEOUT : HVD_ERR_PEER,
                      s.error().kind, s.error().peer_rank});
  return {};
}

Status Ring::check_agreement(const Header& mine) {
  if (broken_) return Error{"the ring is broken by an earlier failure: " + broken_reason_, HVD_ERR_PEER};
  if (size_ == 1) return {};
  Header theirs{};
  if (auto s = step(reinterpret_cast<const char*>(&mine), sizeof mine, reinterpret_cast<char*>(&theirs), sizeof theirs,
                    false);
      !s)
    return s;
  if (!(theirs == mine))
    return fail(Error{"rank " + std::to_string(rank_) + " called " + mine.describe() + " but its left neighbour " +
                          left_.peer().describe() + " called " + theirs.describe(),
                      HVD_ERR_MISMATCH});
  return {};
}

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
      return fail(Error{"rank " + std::to_string(rank_) + " called " + h.describe() + " but " + who + " called " +
                            theirs.describe(),
                        HVD_ERR_MISMATCH});
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
    if (broken_) return Error{"the ring is broken by an earlier failure: " + broken_reason_, HVD_ERR_PEER};
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

Status Ring::hierarchical_allreduce(char* buf, size_t count, hvd_dtype_t dtype, hvd_op_t op) {
  if (broken_) return Error{"the ring is broken by an earlier failure: " + broken_reason_, HVD_ERR_PEER};
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
  if (broken_) return Error{"the ring is broken by an earlier failure: " + broken_reason_, HVD_ERR_PEER};
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

Status Ring::broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root) {
  if (auto s = check_agreement(Header{seq_++, count, root, kBroadcast, static_cast<uint8_t>(dtype), 0, 0}); !s)
    return s;
  if (size_ == 1 || count == 0) return {};
  size_t bytes = count * dtype_size(dtype);
  char* p = static_cast<char*>(buf);
  bool is_root = rank_ == root, is_last = mod(rank_ + 1, size_) == root;
  if (is_root) return step(p, bytes, nullptr, 0, false);
  if (is_last) return step(nullptr, 0, p, bytes, false);
  return step(nullptr, bytes, p, bytes, /*forward=*/true);
}

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

Status Ring::barrier() {
  if (auto s = check_agreement(Header{seq_++, 0, -1, kBarrier, 0, 0, 0}); !s) return s;
  // The header exchange proves the left neighbour arrived; n-1 more token passes prove all did.
  char token = 0, got = 0;
  for (int s = 0; s < size_ - 2; ++s)
    if (auto st = step(&token, 1, &got, 1, false); !st) return st;
  return {};
}

// Variable-length allgather of byte strings (the engine's negotiation): each step sends
// the whole framed string while it receives the peer's 8-byte length, then receives the
// body while it sends what the channel had no room for. A string that fits the ring or the
// socket buffers leaves at once (one exchange, not a length round trip first); a longer one
// never makes both neighbours wait for room only the other's next step frees.
Status Ring::allgather_bytes(std::vector<std::string>* all) {
  if (broken_) return Error{"the ring is broken by an earlier failure: " + broken_reason_, HVD_ERR_PEER};
  if (all->size() != static_cast<size_t>(size_) || (*all)[rank_].size() < kFrameBytes)
    return Error{"internal: allgather_bytes needs one framed string per rank", HVD_ERR_INTERNAL};
  for (int s = 0; s < size_ - 1; ++s) {
    int send_b = mod(rank_ - s, size_), recv_b = mod(rank_ - s - 1, size_);
    std::string& body = (*all)[send_b];
    uint64_t len = body.size() - kFrameBytes, got_len = 0;
    std::memcpy(body.data(), &len, sizeof len);
    size_t sent = 0;
    transport::TransferSpec first;
    first.send = body.data();
    first.send_len = body.size();
    first.recv = reinterpret_cast<char*>(&got_len);
    first.recv_len = sizeof got_len;
    first.sent_out = &sent;
    if (auto st = run(first); !st) return st;
    if (got_len > (64u << 20))
      return fail(Error{"rank " + std::to_string(rank_) + ": negotiation message of " + std::to_string(got_len) +
                            " bytes from " + left_.peer().describe() + " (corrupt stream)",
                        HVD_ERR_INTERNAL});
    std::string& in = (*all)[recv_b];
    in.resize(kFrameBytes + got_len);
    if (auto st = step(body.data() + sent, body.size() - sent, in.data() + kFrameBytes, got_len, false); !st)
      return st;
  }
  return {};
}

Status Ring::allgatherv(const void* sendbuf, void* recvbuf, const std::vector<size_t>& bytes) {
  if (broken_) return Error{"the ring is broken by an earlier failure: " + broken_reason_, HVD_ERR_PEER};
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

// Step s (1..n-1): rank r sends right every block that started at rank r-s+1 and is going
// at least s hops (to ranks r+1 .. r-s+n), and receives those of rank r-s; it keeps the
// one addressed to itself and forwards the rest at the next step.
Status Ring::alltoallv(const void* sendbuf, void* recvbuf, const std::vector<size_t>& bytes) {
  if (broken_) return Error{"the ring is broken by an earlier failure: " + broken_reason_, HVD_ERR_PEER};
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

bool Ring::left_readable() {
  if (!left_.valid()) return false;
  if (auto* shm = left_.shm()) {
    if (shm->readable()) return true;
    // Beside a shared-memory ring the socket carries nothing, only EOF or an error when the
    // peer is gone: look at it every few milliseconds, not at every call (a syscall).
    auto now = std::chrono::steady_clock::now();
    if (now - last_socket_look_ < std::chrono::milliseconds(5)) return false;
    last_socket_look_ = now;
  }
  // Over TCP: data.
  pollfd p{left_.fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void Ring::wait_left(int wake_fd, std::atomic<uint32_t>* wake, uint32_t seen, int timeout_ms) {
  wait_on_left(wake_fd, wake, seen, timeout_ms, false);
}

void Ring::watch_left(int wake_fd, std::atomic<uint32_t>* wake, uint32_t seen, int timeout_ms) {
  std::lock_guard<std::mutex> g(watch_mu_);
  if (closing_) return;
  wait_on_left(wake_fd, wake, seen, timeout_ms, true);
}

// The reader's wait and the watcher's differ only in the shared-memory ring's flag they
// raise (and what they look at: the reader's cached state, or the header alone).
void Ring::wait_on_left(int wake_fd, std::atomic<uint32_t>* wake, uint32_t seen, int timeout_ms, bool watcher) {
  if (wake->load() != seen) return;  // (over TCP the eventfd may have been drained by the other waiter)
  auto* shm = left_.valid() ? left_.shm() : nullptr;
  if (!shm) {
    pollfd p[2] = {{wake_fd, POLLIN, 0}, {left_.valid() ? left_.fd() : -1, POLLIN, 0}};
    ::poll(p, left_.valid() ? 2 : 1, timeout_ms);
    return;
  }
  const int slice_ms = timeout_ms < 0 ? 20 : std::min(timeout_ms, 20);
  transport::ShmChannel::Wait w[2];
  w[0] = watcher ? shm->prepare_watch() : shm->prepare_read_wait();
  w[1] = {wake, seen};
  // The watcher looks at closing_ again: an interrupt() before prepare_watch() read the
  // word would be missed.
  bool ready = watcher ? closing_ || shm->has_data() : shm->readable();
  if (!ready && wake->load() == seen) transport::futex_wait_any(w, 2, static_cast<long>(slice_ms) * 1000000);
  if (watcher)
    shm->end_watch();
  else
    shm->end_read_wait();
}

}  // namespace hvdrun
