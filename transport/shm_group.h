// Shared memory of all the ranks of one host, for collectives that need every rank at once
// rather than a neighbour (collectives/shm_allreduce.cc: an allreduce in two barriers instead of
// 2(n-1) ring steps). Rank 0 makes an anonymous memfd segment (no name in /dev/shm, so no
// crash can leave a file) and tells the others its pid, the fd number and a random token
// (over the ring); each opens /proc/<pid>/fd/<n>, maps it and checks the token. Once every
// rank has mapped it rank 0 closes its fd: the memory lives exactly as long as the mappings.
//
// The segment holds, per rank, an arrival counter, its pid and two small notes, and two
// sets of one slot per rank (slot_bytes each) for the data. barrier(): a rank bumps its
// counter, then waits until every rank's counter has reached its own: a bounded spin, then
// a futex wait on a shared word that arrivals bump, in slices of at most 20 ms, so that a
// peer that died (each rank's process is watched through a pidfd taken while it was alive:
// no pid reuse can fool it), a peer that closed the group (close(): its reason travels in
// the segment) or a silent one (HVDRUN_TIMEOUT) is noticed and named.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace hvdrun::transport {

class ShmGroup {
 public:
  static constexpr size_t kTokenBytes = 16;
  static constexpr size_t kNoteBytes = 64;
  static constexpr int kMaxRanks = 4096;

  ShmGroup() = default;
  ~ShmGroup();
  ShmGroup(ShmGroup&& o) noexcept;
  ShmGroup& operator=(ShmGroup&& o) noexcept;
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  // Rank 0: a new segment for `size` ranks with slots of `slot_bytes` (rounded up to 4 KiB;
  // callers keep 2 x size x slot_bytes modest: every rank maps it all).
  // `host` names this host in errors.
  static Result<ShmGroup> create(int size, size_t slot_bytes, const std::string& host);
  // Rank `rank` (1..size-1): maps rank 0's segment through /proc/<pid>/fd/<fd>, checks the
  // token and the size.
  static Result<ShmGroup> open(int pid, int fd, const std::string& token, int rank, int size, const std::string& host);

  bool valid() const { return base_ != nullptr; }
  int memfd() const { return memfd_.get(); }  // rank 0, until release_memfd()
  void release_memfd() { memfd_.reset(); }
  const std::string& token() const { return token_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }

  // Once every rank has opened the segment (the caller's barrier): a pidfd on each peer's
  // process, so that barrier() notices one that exits.
  Status watch_peers();

  // Rank r's slot of set `set` (0 or 1), and its note of that set (kNoteBytes).
  char* slot(unsigned set, int r) const;
  char* note(unsigned set, int r) const;

  // Arrive and wait for every rank (see above). An error names the rank: kPeerLost (it
  // exited, or closed the group) or kTimeout (it did not arrive within timeout_s), with
  // peer_rank set. spin_yields: sched_yield() at each turn of the spin.
  Status barrier(double timeout_s, int spin_us, bool spin_yields);

  // Marks the group closed (with why: the peers name it), and wakes every waiter. Safe from
  // another thread than the one in barrier(); the memory stays mapped until destruction.
  void close(const std::string& reason = "");

 private:
  struct Header;
  struct Member;
  Member* member(int r) const;
  bool all_arrived(uint64_t epoch, int* missing) const;
  Error peer_error(int peer, const std::string& what) const;
  Status check_peers(uint64_t epoch);
  static Result<ShmGroup> map(UniqueFd fd, int rank, int size, const std::string& host, const std::string& path);

  char* base_ = nullptr;
  size_t map_bytes_ = 0, slot_bytes_ = 0, data_offset_ = 0;
  int rank_ = 0, size_ = 0;
  uint64_t epoch_ = 0;
  std::string host_, token_;
  UniqueFd memfd_;
  std::vector<UniqueFd> pidfds_;  // [rank]; ours invalid
};

}  // namespace hvdrun::transport
