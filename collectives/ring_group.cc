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
#include <unistd.h>

#include <cstring>

#include "collectives/reduce_kernels.h"
#include "collectives/ring_header.h"

namespace hvdrun {

namespace {

struct GroupInfo {  // what rank 0 tells the others about the segment, over the ring
  int32_t pid = 0, fd = -1, ok = 0, pad = 0;
  char token[transport::ShmGroup::kTokenBytes] = {};
};

}  // namespace

// A slot is a pipeline segment (cache-sized: 256 KiB by default), but at most 1 MiB and
// at most 32 MiB / n, so that the segment (two slots a rank) stays small on hosts with
// many ranks or with a large HVDRUN_SEGMENT_BYTES.
size_t group_slot_bytes(size_t segment_bytes, int ranks) {
  size_t cap = std::min<size_t>(size_t{1} << 20, (size_t{32} << 20) / static_cast<size_t>(std::max(ranks, 1)));
  return std::max<size_t>(4096, std::min(segment_bytes, cap));
}

Result<bool> Ring::attach_group(const std::string& host, size_t max_bytes, std::string* why) {
  if (size_ < 2) return false;
  GroupInfo info;
  Result<transport::ShmGroup> g = Error{"not made"};
  if (rank_ == 0) {
    g = transport::ShmGroup::create(size_, group_slot_bytes(opts_.segment_bytes, size_), host);
    if (g) {
      info = {static_cast<int32_t>(getpid()), g->memfd(), 1, 0, {}};
      std::memcpy(info.token, g->token().data(), sizeof info.token);
    }
  }
  if (auto s = broadcast(&info, sizeof info, HVD_UINT8, 0); !s) return s.error();
  if (rank_ != 0)
    g = info.ok ? transport::ShmGroup::open(info.pid, info.fd, std::string(info.token, sizeof info.token), rank_, size_,
                                            host)
                : Result<transport::ShmGroup>(Error{"rank 0 could not make the segment"});
  int32_t ok = g.ok() ? 1 : 0;
  if (auto s = allreduce(&ok, &ok, 1, HVD_INT32, HVD_OP_MIN); !s) return s.error();  // every rank has mapped it
  // Now every rank has written its pid: watch them (each still in this call, so alive).
  if (ok && !g->watch_peers()) ok = 0;
  if (auto s = allreduce(&ok, &ok, 1, HVD_INT32, HVD_OP_MIN); !s) return s.error();
  if (!ok) {
    if (why) *why = g.ok() ? "another rank could not map it or watch its peers" : g.error().message;
    return false;
  }
  g->release_memfd();
  group_ = std::make_unique<transport::ShmGroup>(std::move(*g));
  group_max_bytes_ = max_bytes;
  return true;
}

Status Ring::group_barrier() {
  auto s = group_->barrier(opts_.timeout_s, opts_.spin_us, opts_.spin_yields);
  if (!s)
    return fail(Error{s.error().message, s.error().kind == ErrorKind::kTimeout ? HVD_ERR_TIMEOUT : HVD_ERR_PEER,
                      s.error().kind, s.error().peer_rank});
  return {};
}

// After the barrier of a piece: every rank's note of `set` against ours.
Status Ring::check_group_notes(unsigned set, const Header& h) {
  for (int r = 0; r < size_; ++r) {
    Header theirs;
    std::memcpy(&theirs, group_->note(set, r), sizeof theirs);
    if (!(theirs == h))
      return fail(Error{"rank " + std::to_string(rank_) + " called " + h.describe() + " but rank " + std::to_string(r) +
                            " called " + theirs.describe(),
                        HVD_ERR_MISMATCH});
  }
  return {};
}

Status Ring::group_allreduce(const Header& h, const char* in, char* out, size_t count, hvd_dtype_t dtype, hvd_op_t op) {
  if (broken_) return Error{"the ring is broken by an earlier failure: " + broken_reason_, HVD_ERR_PEER};
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
