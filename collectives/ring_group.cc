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
  int32_t shm_ring = left_.shm() ? 1 : 0;  // the idle wait can watch the segment beside the ring
  if (auto s = allreduce(&shm_ring, &shm_ring, 1, HVD_INT32, HVD_OP_MIN); !s) return s.error();
  if (shm_ring) exchange_group_ = group_.get();
  return true;
}

Status Ring::allgather_bytes(std::vector<std::string>* all) {
  return exchange_group_ ? group_allgather_bytes(all) : RingComm::allgather_bytes(all);
}

namespace {
constexpr uint64_t kExchangeMagic = 0x68766478636867ull;  // "hvdxchg": the note of an exchange
struct ExchangeNote {
  uint64_t magic, bytes;
};
}  // namespace

// Every rank writes its message's length in its note and, when it fits, the message in its
// slot; one barrier; every rank reads the others'. The last rank to arrive wakes all the
// others at once, where the ring hands its message from neighbour to neighbour (n-1
// wake-ups one after the other: under load the ranks left a collective in ring order, ms
// apart). A message too big for a slot: every rank sees it in the notes and the ring
// carries them all.
Status Ring::group_allgather_bytes(std::vector<std::string>* all) {
  if (broken_) return broken_error();
  if (all->size() != static_cast<size_t>(size_) || (*all)[rank_].size() < kFrameBytes)
    return make_error(ErrorKind::kInternal, "internal: allgather_bytes needs one framed string per rank");
  transport::ShmGroup& g = *group_;
  const unsigned set = group_calls_++ & 1u;
  const std::string& mine = (*all)[rank_];
  const ExchangeNote note{kExchangeMagic, mine.size() - kFrameBytes};
  std::memcpy(g.note(set, rank_), &note, sizeof note);
  if (note.bytes <= g.slot_bytes()) std::memcpy(g.slot(set, rank_), mine.data() + kFrameBytes, note.bytes);
  if (auto s = group_barrier(); !s) return s;
  bool fit = true;
  for (int r = 0; r < size_; ++r) {
    ExchangeNote theirs;
    std::memcpy(&theirs, g.note(set, r), sizeof theirs);
    if (theirs.magic != kExchangeMagic)
      return fail(make_error(ErrorKind::kMismatch, "rank " + std::to_string(rank_) +
                                                       " exchanged negotiation messages but rank " + std::to_string(r) +
                                                       " called another collective"));
    fit = fit && theirs.bytes <= g.slot_bytes();
  }
  if (!fit) return RingComm::allgather_bytes(all);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    ExchangeNote theirs;
    std::memcpy(&theirs, g.note(set, r), sizeof theirs);
    std::string& in = (*all)[r];
    in.resize(kFrameBytes + theirs.bytes);
    std::memcpy(in.data() + kFrameBytes, g.slot(set, r), theirs.bytes);
  }
  return {};
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
