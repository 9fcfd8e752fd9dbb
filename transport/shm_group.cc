#include "transport/shm_group.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/auth.h"

namespace hvdrun::transport {

namespace {

constexpr uint64_t kGroupMagic = 0x68766472756e6767ull;  // "hvdrungg"
constexpr size_t kPage = 4096;
constexpr int kSliceMs = 20;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

struct ShmGroup::Header {
  uint64_t magic;
  uint64_t size, slot_bytes, data_offset;
  char token[kTokenBytes];
  alignas(64) std::atomic<uint32_t> gen;  // bumped by an arrival or a close while someone waits
  std::atomic<uint32_t> waiters;
  std::atomic<uint32_t> claim;      // the first close() takes it, then writes reason
  std::atomic<int32_t> closed_by;   // 0, or the closer's rank + 1 (after reason)
  char reason[256];
};

struct ShmGroup::Member {
  alignas(64) std::atomic<uint64_t> arrived;  // barriers this rank has reached
  int32_t pid;
  alignas(64) char note[2][kNoteBytes];
};

ShmGroup::~ShmGroup() {
  if (!base_) return;
  close();
  munmap(base_, map_bytes_);
}

ShmGroup::ShmGroup(ShmGroup&& o) noexcept { *this = std::move(o); }

ShmGroup& ShmGroup::operator=(ShmGroup&& o) noexcept {
  if (this != &o) {
    if (base_) {
      close();
      munmap(base_, map_bytes_);
    }
    base_ = std::exchange(o.base_, nullptr);
    map_bytes_ = o.map_bytes_;
    slot_bytes_ = o.slot_bytes_;
    data_offset_ = o.data_offset_;
    rank_ = o.rank_;
    size_ = o.size_;
    epoch_ = o.epoch_;
    host_ = std::move(o.host_);
    token_ = std::move(o.token_);
    memfd_ = std::move(o.memfd_);
    pidfds_ = std::move(o.pidfds_);
  }
  return *this;
}

ShmGroup::Member* ShmGroup::member(int r) const {
  return reinterpret_cast<Member*>(base_ + kPage + sizeof(Member) * static_cast<size_t>(r));
}

char* ShmGroup::slot(unsigned set, int r) const {
  return base_ + data_offset_ + ((set & 1u) * static_cast<size_t>(size_) + static_cast<size_t>(r)) * slot_bytes_;
}

char* ShmGroup::note(unsigned set, int r) const { return member(r)->note[set & 1u]; }

Result<ShmGroup> ShmGroup::create(int size, size_t slot_bytes, const std::string& host) {
  static_assert(sizeof(Header) <= kPage);
  if (size < 1 || size > kMaxRanks) return make_error(ErrorKind::kInvalidArgument,
                                                      "a shared-memory group of " + std::to_string(size) + " ranks");
  slot_bytes = round_up(std::max<size_t>(slot_bytes, kPage), kPage);
  UniqueFd fd(static_cast<int>(syscall(SYS_memfd_create, "hvdrun-group", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (!fd.valid()) return make_sys_error(ErrorKind::kSystem,
                                         std::string("memfd_create: ") + std::strerror(errno), errno);
  const size_t data_offset = round_up(kPage + sizeof(Member) * static_cast<size_t>(size), kPage);
  const size_t bytes = data_offset + 2 * static_cast<size_t>(size) * slot_bytes;
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return make_sys_error(ErrorKind::kSystem,
                          "memfd of " + std::to_string(bytes) + " bytes: " + std::strerror(errno), errno);
  // Its size is fixed: nobody (another process of this user with the fd) can shrink it
  // under the ranks' mappings (SIGBUS).
  if (fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return make_sys_error(ErrorKind::kSystem, std::string("sealing the group's memfd: ") + std::strerror(errno), errno);
  void* p = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return make_sys_error(ErrorKind::kSystem,
                                             std::string("mmap of the group's segment: ") + std::strerror(errno), errno);
  std::string token = auth::random_bytes(kTokenBytes);
  auto* h = new (p) Header{};
  h->magic = kGroupMagic;
  h->size = static_cast<uint64_t>(size);
  h->slot_bytes = slot_bytes;
  h->data_offset = data_offset;
  std::memcpy(h->token, token.data(), kTokenBytes);
  munmap(p, kPage);
  auto g = map(std::move(fd), 0, size, host, "the new segment");
  if (!g) return g.error();
  g->token_ = std::move(token);
  return g;
}

Result<ShmGroup> ShmGroup::open(int pid, int fd, const std::string& token, int rank, int size, const std::string& host) {
  std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  UniqueFd f(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!f.valid()) return make_sys_error(ErrorKind::kSystem, "open " + path + ": " + std::strerror(errno), errno);
  off_t bytes = lseek(f.get(), 0, SEEK_END);
  if (bytes < static_cast<off_t>(kPage)) return make_error(ErrorKind::kMalformed, path + " is not a group segment");
  void* p = mmap(nullptr, kPage, PROT_READ, MAP_SHARED, f.get(), 0);
  if (p == MAP_FAILED) return make_sys_error(ErrorKind::kSystem,
                                             "mmap of " + path + ": " + std::strerror(errno), errno);
  const auto* h = static_cast<const Header*>(p);
  bool ours = h->magic == kGroupMagic && h->size == static_cast<uint64_t>(size) && token.size() == kTokenBytes &&
              auth::constant_time_equal(std::string_view(h->token, kTokenBytes), token);
  munmap(p, kPage);
  if (!ours) return make_error(ErrorKind::kMalformed, path + " is not the segment rank 0 announced");
  auto g = map(std::move(f), rank, size, host, path);
  if (!g) return g.error();
  g->token_ = token;
  return g;
}

// Maps the whole segment (its layout from the header, checked against its size) and
// records our pid; the fd stays open for rank 0 only (the others' open it through it).
Result<ShmGroup> ShmGroup::map(UniqueFd fd, int rank, int size, const std::string& host, const std::string& path) {
  off_t bytes = lseek(fd.get(), 0, SEEK_END);
  // Not populated here: a slot's pages are made as the collectives first touch them, not
  // all at once inside hvd_init.
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return make_sys_error(ErrorKind::kSystem,
                                             "mmap of " + path + ": " + std::strerror(errno), errno);
  ShmGroup g;
  g.base_ = static_cast<char*>(p);
  g.map_bytes_ = static_cast<size_t>(bytes);
  const auto* h = reinterpret_cast<const Header*>(p);
  g.slot_bytes_ = h->slot_bytes;
  g.data_offset_ = h->data_offset;
  g.rank_ = rank;
  g.size_ = size;
  g.host_ = host;
  if (g.data_offset_ < kPage + sizeof(Member) * static_cast<size_t>(size) ||
      g.data_offset_ + 2 * static_cast<size_t>(size) * g.slot_bytes_ != g.map_bytes_)
    return make_error(ErrorKind::kMalformed, path + ": the group segment's layout does not match its size");
  g.member(rank)->pid = static_cast<int32_t>(getpid());
  if (rank == 0) g.memfd_ = std::move(fd);
  return g;
}

Status ShmGroup::watch_peers() {
  pidfds_.clear();
  pidfds_.resize(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    int pid = member(r)->pid;
    pidfds_[r].reset(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
    if (!pidfds_[r].valid())
      return peer_error(r, "cannot be watched: pidfd_open(" + std::to_string(pid) + "): " + std::strerror(errno));
  }
  return {};
}

Error ShmGroup::peer_error(int peer, const std::string& what) const {
  Error e = make_error(ErrorKind::kPeerLost, "rank " + std::to_string(peer) + " (host " + host_ + ") " + what);
  e.peer_rank = peer;
  return e;
}

bool ShmGroup::all_arrived(uint64_t epoch, int* missing) const {
  for (int r = 0; r < size_; ++r)
    if (member(r)->arrived.load(std::memory_order_acquire) < epoch) {
      *missing = r;
      return false;
    }
  return true;
}

// A closed group (by a peer, or by this rank from another thread), or a peer that has not
// arrived and whose process has exited.
Status ShmGroup::check_peers(uint64_t epoch) {
  auto* h = reinterpret_cast<Header*>(base_);
  if (int by = h->closed_by.load(std::memory_order_acquire)) {
    std::string why(h->reason, strnlen(h->reason, sizeof h->reason));
    if (by - 1 == rank_) return make_error(ErrorKind::kPeerLost, "closed" + (why.empty() ? std::string() : ": " + why));
    return peer_error(by - 1, why.empty() ? "left the collective (it exited or failed)" : "failed on: " + why);
  }
  std::vector<pollfd> p;
  std::vector<int> who;
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && r < static_cast<int>(pidfds_.size()) && pidfds_[r].valid() &&
        member(r)->arrived.load(std::memory_order_acquire) < epoch) {
      p.push_back({pidfds_[r].get(), POLLIN, 0});
      who.push_back(r);
    }
  if (!p.empty() && ::poll(p.data(), p.size(), 0) > 0)
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i].revents) return peer_error(who[i], "exited (pid " + std::to_string(member(who[i])->pid) + ")");
  return {};
}

Status ShmGroup::barrier(double timeout_s, int spin_us, bool spin_yields) {
  auto* h = reinterpret_cast<Header*>(base_);
  const uint64_t epoch = ++epoch_;
  member(rank_)->arrived.store(epoch, std::memory_order_seq_cst);
  if (h->waiters.load(std::memory_order_seq_cst)) {
    h->gen.fetch_add(1, std::memory_order_seq_cst);
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->gen), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto spin = std::chrono::microseconds(spin_us);
  const auto timeout = std::chrono::duration<double>(timeout_s);
  int missing = -1;
  for (;;) {
    if (all_arrived(epoch, &missing)) return {};
    auto now = Clock::now();
    if (now - start < spin && !h->closed_by.load(std::memory_order_relaxed)) {
      if (spin_yields) sched_yield();
      continue;
    }
    // A failure seen only now may come from a rank that arrived, passed and then failed
    // (or closed) in between: every rank arrived, so the barrier holds.
    if (auto s = check_peers(epoch); !s) return all_arrived(epoch, &missing) ? Status{} : s;
    if (now - start > timeout) {
      Error e = make_error(ErrorKind::kTimeout, "no progress with rank " + std::to_string(missing) + " (host " + host_ +
                                                    ") for " + std::to_string(int(timeout_s)) +
                                                    " s (HVDRUN_TIMEOUT): it did not reach the collective's barrier");
      e.peer_rank = missing;
      return e;
    }
    // Sleep until an arrival or a close bumps gen (the Dekker pair: we count ourselves as a
    // waiter before looking again; an arriving rank stores its arrival before looking for
    // waiters).
    h->waiters.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // all_arrived()'s loads come after it
    uint32_t g = h->gen.load(std::memory_order_seq_cst);
    if (!all_arrived(epoch, &missing) && !h->closed_by.load(std::memory_order_seq_cst)) {
      timespec rel{0, kSliceMs * 1000000L};
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->gen), FUTEX_WAIT, g, &rel, nullptr, 0);
    }
    h->waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void ShmGroup::close(const std::string& reason) {
  if (!base_) return;
  auto* h = reinterpret_cast<Header*>(base_);
  uint32_t expected = 0;
  if (h->claim.compare_exchange_strong(expected, 1)) {
    size_t n = std::min(reason.size(), sizeof h->reason - 1);
    std::memcpy(h->reason, reason.data(), n);
    h->reason[n] = 0;
    h->closed_by.store(rank_ + 1, std::memory_order_seq_cst);
  }
  h->gen.fetch_add(1, std::memory_order_seq_cst);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->gen), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace hvdrun::transport
