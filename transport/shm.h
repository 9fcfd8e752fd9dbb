// Shared-memory channel between two ranks of one host: one direction, one producer (the
// rank that sends), one consumer. The producer makes an anonymous memfd segment (no name in
// /dev/shm, so no crash can leave a file), maps it, and tells the consumer its pid, the fd
// number and a random token over the pair's authenticated TCP connection; the consumer
// opens /proc/<pid>/fd/<n> (same user, same machine), maps it, and checks the token. Once
// both have mapped it the producer closes its fd: the memory lives exactly as long as the
// two mappings.
//
// The segment holds a byte-stream ring (single producer, single consumer, capacity a power
// of two): the producer copies bytes in at `head`, the consumer takes them out at `tail`;
// each side caches the other's index and reads it only when the cached one says full or
// empty. A side with nothing to do spins (bounded, in transfer()), then waits on a futex
// word of the segment (`data_seq` for the consumer, `space_seq` for the producer) for at
// most a slice, so that a dead peer is noticed: the TCP connection, kept open beside the
// ring, reads EOF when the peer's process is gone. A side that closes sets `closed` and
// wakes both words. Bytes written before a close are still delivered (as TCP does).
//
// Single copy (Open MPI's CMA): instead of copying a large message into the ring, the
// producer may *post* it as a block (its address and length in the header); the consumer
// copies it straight out of the producer's memory with process_vm_readv, in pieces, and
// tells the producer when it has all of it. One copy instead of two, done by the side that
// needs the bytes. A block is part of the stream: ring bytes written before it are read
// first, and the producer writes nothing more until the block is taken. The consumer checks
// at open() that it may read the producer's memory (ptrace rules, seccomp); the producer
// posts only then, and only blocks of at least set_single_copy_min() bytes. A block still
// untaken when the producer closes is not delivered: its memory may be gone.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace hvdrun::transport {

class ShmChannel {
 public:
  static constexpr size_t kTokenBytes = 16;

  ShmChannel() = default;
  ~ShmChannel();
  ShmChannel(ShmChannel&& o) noexcept;
  ShmChannel& operator=(ShmChannel&& o) noexcept;
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  // Producer: a new segment with a ring of `ring_bytes` (rounded up to a power of two).
  static Result<ShmChannel> create(size_t ring_bytes);
  // Consumer: maps the producer's segment through /proc/<pid>/fd/<fd> and checks the token.
  static Result<ShmChannel> open(int pid, int fd, const std::string& token);

  bool valid() const { return hdr_ != nullptr; }
  int memfd() const { return memfd_.get(); }  // producer, until release_memfd()
  void release_memfd() { memfd_.reset(); }
  const std::string& token() const { return token_; }
  size_t capacity() const { return cap_; }

  // Non-blocking: copy in / out as many bytes as fit / are there; 0 when none.
  size_t write(const char* src, size_t len);
  size_t read(char* dst, size_t len);
  // Consumer, in place: the bytes readable without a copy (contiguous, up to the ring's
  // end; their length, 0 when none), then taking `n` of them once used.
  const char* peek(size_t* len);
  void consume(size_t n);
  // Single copy. Producer: post blocks of at least `bytes` (0: never) when the consumer
  // could read our memory; can_post() says whether a block of `len` would be posted.
  // post(): the consumer copies `data` out of our memory; it must stay as it is until
  // block_taken() (or the channel closes). No write() meanwhile.
  void set_single_copy_min(size_t bytes) { single_copy_min_ = bytes; }
  bool can_post(size_t len) const;
  bool single_copy() const { return can_post(SIZE_MAX); }  // producer: blocks may be posted
  void post(const char* data, size_t len);
  bool block_taken() const;
  // Consumer: the bytes left of a posted block when it is next in the stream (0: none, or
  // ring bytes come first); pull() copies up to `len` of them into `dst`: their number, 0
  // when the producer closed or exited meanwhile (nothing delivered: its pid may name
  // another process by now; a pidfd taken at open() tells), -1 and errno when
  // process_vm_readv fails (the producer is gone: ESRCH; or the kernel refuses).
  size_t block_left();
  ssize_t pull(char* dst, size_t len);
  // Consumer: the kernel refused a pull on a live producer: end the block where it stands
  // (the producer sends the rest through the ring) and stop single copy on this channel.
  void refuse_block();
  // Producer, once block_taken(): where the consumer refused the block (SIZE_MAX: it took
  // it all); reading it clears it. block_progress() changes as the consumer pulls.
  size_t refused_at();
  uint64_t block_progress() const;

  // The peer has closed (Pair::close, Ring::fail, shutdown) and, for the consumer, every
  // byte it wrote has been read.
  bool peer_closed() const;

  // Waiting. A side calls prepare_*() (which flags it as waiting and returns the futex word
  // and its value), then checks once more with *_ready(), then futex-waits on the word.
  struct Wait {
    std::atomic<uint32_t>* word = nullptr;
    uint32_t value = 0;
  };
  Wait prepare_read_wait();
  Wait prepare_write_wait();
  void end_read_wait();
  void end_write_wait();
  bool readable();  // consumer: bytes are there (or the peer closed)

  // The consumer's watcher: another thread than the one reading may wait for data without
  // touching the reader's state (prepare_watch(), has_data(), futex wait, end_watch()); the
  // producer wakes both. interrupt() wakes the watcher for nothing (before a close).
  Wait prepare_watch();
  void end_watch();
  bool has_data() const;
  void interrupt();
  bool writable();  // producer: space is there (or the peer closed)

  // Marks the channel closed for the peer (with why, when it failed: the peer names it in
  // its own error), wakes it, and unmaps.
  void close(const std::string& reason = "");
  // Why the peer closed ("" when it said nothing); meaningful once peer_closed().
  std::string peer_reason() const;

 private:
  struct Header;
  void wake_consumer();
  void wake_producer();
  Header* hdr_ = nullptr;
  char* data_ = nullptr;
  size_t cap_ = 0, map_bytes_ = 0;
  uint64_t cached_ = 0;  // producer: the tail last seen; consumer: the head last seen
  uint64_t pos_ = 0;     // producer: our head; consumer: our tail
  bool producer_ = false;
  // Single copy. Producer: the smallest block to post, blocks posted; consumer: the
  // producer's pid (0: no single copy), blocks taken, bytes taken of the current one.
  size_t single_copy_min_ = 0;
  uint64_t blocks_ = 0;
  pid_t peer_pid_ = 0;
  UniqueFd peer_pidfd_;  // consumer: the producer's process, while single copy is on
  uint64_t block_off_ = 0;
  UniqueFd memfd_;
  std::string token_;
};

// Blocks until one of the words changes from its value (a wake), `timeout_ns` passes, or a
// signal: futex_waitv over up to two words of shared (not process-private) memory.
void futex_wait_any(const ShmChannel::Wait* waits, int n, long timeout_ns);

}  // namespace hvdrun::transport
