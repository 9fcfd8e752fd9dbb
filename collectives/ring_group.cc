// The shared-memory group of a job whose ranks all share one host: the segment every rank
// maps (attach_group, over the ring), the barrier of its pieces and the check of the
// ranks' notes. The algorithms over it: shm_allreduce.cc, shm_reducescatter.cc.
#include <unistd.h>

#include <cstring>

#include "collectives/ring.h"
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
  Result<transport::ShmGroup> g = make_error(ErrorKind::kInternal, "not made");
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
                : Result<transport::ShmGroup>(make_error(ErrorKind::kInternal, "rank 0 could not make the segment"));
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
    return fail(transfer_failed(s.error()));
  return {};
}

// After the barrier of a piece: every rank's note of `set` against ours.
Status Ring::check_group_notes(unsigned set, const Header& h) {
  for (int r = 0; r < size_; ++r) {
    Header theirs;
    std::memcpy(&theirs, group_->note(set, r), sizeof theirs);
    if (!(theirs == h))
      return fail(make_error(ErrorKind::kMismatch,
                             "rank " + std::to_string(rank_) + " called " + h.describe() + " but rank " + std::to_string(r) +
                                 " called " + theirs.describe()));
  }
  return {};
}

}  // namespace hvdrun
