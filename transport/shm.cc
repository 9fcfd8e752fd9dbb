#include "transport/shm.h"

#include <fcntl.h>
#include <poll.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/auth.h"

namespace hvdrun::transport {

namespace {

constexpr uint64_t kMagic = 0x68766472756e7368ull;  // "hvdrunsh"
constexpr size_t kHeaderBytes = 4096;               // the data starts on its own page
constexpr uint64_t kNotRefused = ~0ull;

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

struct WaitV {  // struct futex_waitv (linux/futex.h, 5.16+)
  uint64_t val;
  uint64_t uaddr;
  uint32_t flags;
  uint32_t reserved;
};
constexpr uint32_t kFutex2SizeU32 = 0x02;

// Wakes every waiter: the consumer's word can have two (the thread running the transfer and
// the engine's watcher, see prepare_watch()).
void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace

// Producer and consumer fields on their own cache lines.
struct ShmChannel::Header {
  uint64_t magic;
  uint64_t capacity;
  char token[kTokenBytes];
  uint64_t producer_addr;                  // where the producer mapped this header
  alignas(64) std::atomic<uint64_t> head;  // written by the producer
  std::atomic<uint32_t> data_seq;          // bumped when the consumer waits and data came
  std::atomic<uint32_t> consumer_waiting;
  std::atomic<uint32_t> watcher_waiting;  // the consumer's watcher (another thread) waits
  std::atomic<uint32_t> producer_closed;
  uint64_t block_addr, block_len;          // the block posted last (written before blocks_posted)
  std::atomic<uint64_t> blocks_posted;
  alignas(64) std::atomic<uint64_t> tail;  // written by the consumer
  std::atomic<uint32_t> space_seq;
  std::atomic<uint32_t> producer_waiting;
  std::atomic<uint32_t> consumer_closed;
  std::atomic<uint32_t> single_copy_ok;    // the consumer could read the producer's memory
  std::atomic<uint64_t> blocks_taken;
  std::atomic<uint64_t> block_pulled;      // bytes of the current block taken (progress)
  std::atomic<uint64_t> block_refused_at;  // kNotRefused, or where the kernel refused a copy
  alignas(64) char producer_reason[256];  // written before producer_closed
  char consumer_reason[256];               // written before consumer_closed
};

// A side that made the other's wait pointless (data or a block for the consumer, space or
// a taken block for the producer) bumps that side's word and wakes it, when it waits.
void ShmChannel::wake_consumer() {
  if (hdr_->consumer_waiting.load(std::memory_order_seq_cst) || hdr_->watcher_waiting.load(std::memory_order_seq_cst)) {
    hdr_->data_seq.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(&hdr_->data_seq);
  }
}
void ShmChannel::wake_producer() {
  if (hdr_->producer_waiting.load(std::memory_order_seq_cst)) {
    hdr_->space_seq.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(&hdr_->space_seq);
  }
}

ShmChannel::~ShmChannel() { close(); }

ShmChannel::ShmChannel(ShmChannel&& o) noexcept { *this = std::move(o); }

ShmChannel& ShmChannel::operator=(ShmChannel&& o) noexcept {
  if (this != &o) {
    close();
    hdr_ = o.hdr_;
    data_ = o.data_;
    cap_ = o.cap_;
    map_bytes_ = o.map_bytes_;
    cached_ = o.cached_;
    pos_ = o.pos_;
    memfd_ = std::move(o.memfd_);
    token_ = std::move(o.token_);
    producer_ = o.producer_;
    single_copy_min_ = o.single_copy_min_;
    blocks_ = o.blocks_;
    peer_pid_ = o.peer_pid_;
    peer_pidfd_ = std::move(o.peer_pidfd_);
    block_off_ = o.block_off_;
    o.hdr_ = nullptr;
    o.data_ = nullptr;
  }
  return *this;
}

Result<ShmChannel> ShmChannel::create(size_t ring_bytes) {
  static_assert(sizeof(Header) <= kHeaderBytes);
  size_t cap = 4096;
  while (cap < ring_bytes) cap <<= 1;
  ShmChannel c;
  c.memfd_.reset(static_cast<int>(syscall(SYS_memfd_create, "hvdrun-shm", MFD_CLOEXEC)));
  if (!c.memfd_.valid()) return make_sys_error(ErrorKind::kSystem,
                                               std::string("memfd_create: ") + std::strerror(errno), errno);
  c.map_bytes_ = kHeaderBytes + cap;
  if (ftruncate(c.memfd_.get(), static_cast<off_t>(c.map_bytes_)) != 0)
    return make_sys_error(ErrorKind::kSystem,
                          std::string("memfd of ") + std::to_string(c.map_bytes_) + " bytes: " + std::strerror(errno), errno);
  void* p = mmap(nullptr, c.map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, c.memfd_.get(), 0);
  if (p == MAP_FAILED) return make_sys_error(ErrorKind::kSystem,
                                             std::string("mmap of the shared segment: ") + std::strerror(errno), errno);
  c.hdr_ = new (p) Header{};
  c.data_ = static_cast<char*>(p) + kHeaderBytes;
  c.cap_ = cap;
  c.token_ = auth::random_bytes(kTokenBytes);
  c.producer_ = true;
  c.hdr_->magic = kMagic;
  c.hdr_->capacity = cap;
  c.hdr_->producer_addr = reinterpret_cast<uint64_t>(p);
  c.hdr_->block_refused_at.store(kNotRefused);
  std::memcpy(c.hdr_->token, c.token_.data(), kTokenBytes);
  return c;
}

Result<ShmChannel> ShmChannel::open(int pid, int fd, const std::string& token) {
  std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  UniqueFd f(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!f.valid()) return make_sys_error(ErrorKind::kSystem, "open " + path + ": " + std::strerror(errno), errno);
  off_t size = lseek(f.get(), 0, SEEK_END);
  if (size < static_cast<off_t>(kHeaderBytes + 4096)) return make_error(ErrorKind::kMalformed,
                                                                        path + " is not a shared segment");
  void* p = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, f.get(), 0);
  if (p == MAP_FAILED) return make_sys_error(ErrorKind::kSystem,
                                             std::string("mmap of the shared segment: ") + std::strerror(errno), errno);
  ShmChannel c;
  c.hdr_ = static_cast<Header*>(p);
  c.data_ = static_cast<char*>(p) + kHeaderBytes;
  c.map_bytes_ = static_cast<size_t>(size);
  c.cap_ = c.hdr_->capacity;
  if (c.hdr_->magic != kMagic || c.cap_ + kHeaderBytes != c.map_bytes_ || token.size() != kTokenBytes ||
      !auth::constant_time_equal(std::string_view(c.hdr_->token, kTokenBytes), token))
    return make_error(ErrorKind::kMalformed,
                      path + " is not the segment the peer announced (another machine with the same host name?)");
  c.token_ = token;
  // Single copy only where we may read the producer's memory (same user, no ptrace
  // restriction or seccomp rule against it): read its header's magic there.
  uint64_t magic = 0;
  iovec local{&magic, sizeof magic}, remote{reinterpret_cast<void*>(c.hdr_->producer_addr), sizeof magic};
  // The pidfd, taken while the producer is alive, tells a pull whether the pid still names
  // it (a pid reused by another process after the producer died would hand out its memory).
  c.peer_pidfd_.reset(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (c.peer_pidfd_.valid() && process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof magic) &&
      magic == kMagic) {
    c.peer_pid_ = pid;
    c.hdr_->single_copy_ok.store(1, std::memory_order_release);
  }
  return c;
}

bool ShmChannel::can_post(size_t len) const {
  return producer_ && single_copy_min_ > 0 && len >= single_copy_min_ &&
         hdr_->single_copy_ok.load(std::memory_order_acquire);
}

void ShmChannel::post(const char* data, size_t len) {
  hdr_->block_addr = reinterpret_cast<uint64_t>(data);
  hdr_->block_len = len;
  hdr_->blocks_posted.store(++blocks_, std::memory_order_seq_cst);
  wake_consumer();
}

bool ShmChannel::block_taken() const { return hdr_->blocks_taken.load(std::memory_order_acquire) == blocks_; }

size_t ShmChannel::block_left() {
  if (hdr_->blocks_posted.load(std::memory_order_acquire) == blocks_) return 0;
  // The producer stored head before it posted: bytes it wrote earlier are read first.
  if (hdr_->head.load(std::memory_order_acquire) != pos_) return 0;
  return hdr_->block_len - block_off_;
}

ssize_t ShmChannel::pull(char* dst, size_t len) {
  size_t n = std::min<uint64_t>(len, hdr_->block_len - block_off_);
  iovec local{dst, n}, remote{reinterpret_cast<void*>(hdr_->block_addr + block_off_), n};
  ssize_t got = process_vm_readv(peer_pid_, &local, 1, &remote, 1, 0);
  if (got <= 0) {
    if (got == 0) errno = EFAULT;
    return -1;
  }
  hdr_->block_pulled.store(block_off_ + static_cast<uint64_t>(got), std::memory_order_relaxed);
  // A producer that closed meanwhile may have freed the block, and one that exited may have
  // left its pid to another process: what we read is not its.
  if (hdr_->producer_closed.load(std::memory_order_acquire)) return 0;
  pollfd exited{peer_pidfd_.get(), POLLIN, 0};
  if (::poll(&exited, 1, 0) > 0 && (exited.revents & POLLIN)) return 0;
  block_off_ += static_cast<uint64_t>(got);
  if (block_off_ == hdr_->block_len) {
    block_off_ = 0;
    hdr_->blocks_taken.store(++blocks_, std::memory_order_seq_cst);
    wake_producer();
  }
  return got;
}

size_t ShmChannel::write(const char* src, size_t len) {
  if (pos_ - cached_ + len > cap_) cached_ = hdr_->tail.load(std::memory_order_acquire);
  size_t n = std::min(len, cap_ - (pos_ - cached_));
  if (n == 0) return 0;
  size_t at = pos_ & (cap_ - 1), first = std::min(n, cap_ - at);
  std::memcpy(data_ + at, src, first);
  if (n > first) std::memcpy(data_, src + first, n - first);
  pos_ += n;
  hdr_->head.store(pos_, std::memory_order_seq_cst);
  wake_consumer();
  return n;
}

size_t ShmChannel::read(char* dst, size_t len) {
  if (cached_ - pos_ < len) cached_ = hdr_->head.load(std::memory_order_acquire);
  size_t n = std::min<size_t>(len, cached_ - pos_);
  if (n == 0) return 0;
  size_t at = pos_ & (cap_ - 1), first = std::min(n, cap_ - at);
  std::memcpy(dst, data_ + at, first);
  if (n > first) std::memcpy(dst + first, data_, n - first);
  consume(n);
  return n;
}

const char* ShmChannel::peek(size_t* len) {
  if (cached_ == pos_) cached_ = hdr_->head.load(std::memory_order_acquire);
  size_t at = pos_ & (cap_ - 1);
  *len = std::min<size_t>(cached_ - pos_, cap_ - at);
  return data_ + at;
}

void ShmChannel::consume(size_t n) {
  pos_ += n;
  hdr_->tail.store(pos_, std::memory_order_seq_cst);
  wake_producer();
}

bool ShmChannel::peer_closed() const {
  if (producer_) return hdr_->consumer_closed.load(std::memory_order_acquire);
  return hdr_->producer_closed.load(std::memory_order_acquire) && hdr_->head.load(std::memory_order_acquire) == pos_;
}

ShmChannel::Wait ShmChannel::prepare_read_wait() {
  hdr_->consumer_waiting.store(1, std::memory_order_seq_cst);
  return {&hdr_->data_seq, hdr_->data_seq.load(std::memory_order_seq_cst)};
}
ShmChannel::Wait ShmChannel::prepare_write_wait() {
  hdr_->producer_waiting.store(1, std::memory_order_seq_cst);
  return {&hdr_->space_seq, hdr_->space_seq.load(std::memory_order_seq_cst)};
}
ShmChannel::Wait ShmChannel::prepare_watch() {
  hdr_->watcher_waiting.store(1, std::memory_order_seq_cst);
  return {&hdr_->data_seq, hdr_->data_seq.load(std::memory_order_seq_cst)};
}
void ShmChannel::end_watch() { hdr_->watcher_waiting.store(0, std::memory_order_relaxed); }
void ShmChannel::refuse_block() {
  // The producer's memory is still there (a live peer) but the kernel will not copy it
  // (memfd_secret, device memory, a sender made non-dumpable): the block ends here, the
  // producer sends the rest through the ring, and single copy stops on this channel.
  hdr_->single_copy_ok.store(0, std::memory_order_seq_cst);
  hdr_->block_refused_at.store(block_off_, std::memory_order_seq_cst);
  block_off_ = 0;
  hdr_->blocks_taken.store(++blocks_, std::memory_order_seq_cst);
  wake_producer();
}

size_t ShmChannel::refused_at() {
  uint64_t at = hdr_->block_refused_at.exchange(kNotRefused, std::memory_order_seq_cst);
  return at == kNotRefused ? SIZE_MAX : static_cast<size_t>(at);
}

uint64_t ShmChannel::block_progress() const {
  return hdr_->block_pulled.load(std::memory_order_relaxed) + hdr_->blocks_taken.load(std::memory_order_relaxed);
}

bool ShmChannel::has_data() const {
  return hdr_->head.load(std::memory_order_seq_cst) != hdr_->tail.load(std::memory_order_seq_cst) ||
         hdr_->blocks_posted.load(std::memory_order_seq_cst) != hdr_->blocks_taken.load(std::memory_order_seq_cst) ||
         hdr_->producer_closed.load(std::memory_order_acquire);
}
void ShmChannel::interrupt() {
  hdr_->data_seq.fetch_add(1);
  futex_wake(&hdr_->data_seq);
}
void ShmChannel::end_read_wait() { hdr_->consumer_waiting.store(0, std::memory_order_relaxed); }
void ShmChannel::end_write_wait() { hdr_->producer_waiting.store(0, std::memory_order_relaxed); }

bool ShmChannel::readable() {
  cached_ = hdr_->head.load(std::memory_order_seq_cst);
  return cached_ != pos_ || hdr_->blocks_posted.load(std::memory_order_seq_cst) != blocks_ ||
         hdr_->producer_closed.load(std::memory_order_acquire);
}
bool ShmChannel::writable() {
  if (!block_taken()) return hdr_->consumer_closed.load(std::memory_order_acquire);
  cached_ = hdr_->tail.load(std::memory_order_seq_cst);
  return pos_ - cached_ < cap_ || hdr_->consumer_closed.load(std::memory_order_acquire);
}

std::string ShmChannel::peer_reason() const {
  if (!hdr_) return "";
  const char* r = producer_ ? hdr_->consumer_reason : hdr_->producer_reason;
  return std::string(r, strnlen(r, sizeof hdr_->producer_reason));
}

void ShmChannel::close(const std::string& reason) {
  if (!hdr_) return;
  char* r = producer_ ? hdr_->producer_reason : hdr_->consumer_reason;
  size_t n = std::min(reason.size(), sizeof hdr_->producer_reason - 1);
  std::memcpy(r, reason.data(), n);
  r[n] = '\0';
  (producer_ ? hdr_->producer_closed : hdr_->consumer_closed).store(1, std::memory_order_release);
  hdr_->data_seq.fetch_add(1);
  hdr_->space_seq.fetch_add(1);
  futex_wake(&hdr_->data_seq);
  futex_wake(&hdr_->space_seq);
  munmap(hdr_, map_bytes_);
  hdr_ = nullptr;
  data_ = nullptr;
  memfd_.reset();
}

void futex_wait_any(const ShmChannel::Wait* waits, int n, long timeout_ns) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += timeout_ns / 1000000000;
  ts.tv_nsec += timeout_ns % 1000000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  WaitV v[2];
  for (int i = 0; i < n && i < 2; ++i)
    v[i] = {waits[i].value, reinterpret_cast<uint64_t>(waits[i].word), kFutex2SizeU32, 0};
  if (syscall(SYS_futex_waitv, v, n, 0, &ts, CLOCK_MONOTONIC) == -1 && errno == ENOSYS) {
    // Kernels before 5.16: wait on the first word only, in short slices.
    timespec rel{0, std::min<long>(timeout_ns, 1000000)};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(waits[0].word), FUTEX_WAIT, waits[0].value, &rel, nullptr, 0);
  }
}

}  // namespace hvdrun::transport
