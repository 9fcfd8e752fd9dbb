// The collective engine.
//
// Callers only queue requests (submit) and wait for them. Whichever thread holds
// drive_mu_ runs *cycles*: the background thread when there is work and nobody waits, or a
// thread blocked in wait() on an idle engine (so that a single call costs no hand-off
// between threads). A cycle is one ring allgather of every rank's message:
//
//   flags (joined, leaving) | bit vector of pending cached requests | names whose cached
//   response is invalid | full specs of the requests not announced before | eager data
//   (small host allreduces, cached or announced in full: see place_eager)
//
// Every rank processes the same messages in rank order, so every rank computes the same
// table of announced names, the same cache, and the same list of responses, in the same
// order, without a coordinator. A name is ready when every rank that has not joined has
// announced it (in full, or by its cache bit). Cached responses (ordered by cache id) run
// first, then the ones from the table in the order they were first announced. Consecutive
// host allreduces of one dtype and reduction go through the fusion buffer together.
//
// Cycles start on events, not on a clock: a rank with new local requests starts one at
// once, and the other ranks join it as its message arrives on their left socket (the
// engine waits in poll() on that socket and on an eventfd that submit() signals). So a
// call on an idle engine costs one negotiation exchange and its transfer, never a cycle
// period. In steady state (every name cached) the message is the bit vector only.
//
// The response cache: a name's agreed spec gets the lowest free id when it first runs;
// every rank does the same insertions and evictions (LRU, HVDRUN_CACHE_CAPACITY) in the
// same order, so ids agree. A rank that submits a cached name with a different spec
// announces it in full and as invalid; every rank then drops it, and ranks that had sent
// its bit announce it again in full, so the mismatch is found by the full comparison.
#include "collectives/engine/engine.h"

#include <poll.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>

#include "collectives/dtype.h"
#include "collectives/engine/cycle_message.h"
#include "collectives/gpu.h"
#include "collectives/reduce_kernels.h"
#include "collectives/ring.h"
#include "collectives/timeline.h"

namespace hvdrun {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string fmt_double(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// A spec's dtype for a mismatch report: "float32", or "float32,float64" for a group of
// several; `vs_several`: "float32 (every tensor)" for a group of one, against such a group.
std::string dtypes_label(const Spec& s, bool vs_several) {
  if (s.dtypes.empty())
    return std::string(dtype_name(static_cast<hvd_dtype_t>(s.dtype))) + (vs_several ? " (every tensor)" : "");
  std::string out;
  for (size_t k = 0; k < s.dtypes.size(); ++k) out += (k ? "," : "") + std::string(dtype_name(s.dtype_at(k)));
  return out;
}

std::string join_u64(const std::vector<uint64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

struct Engine::Op {
  hvd_handle_t handle = 0;
  Request req;
  std::atomic<bool> done{false};  // set under mu_ after status; read without it too
  Status status;
  enum State { kQueued, kFull, kCached, kReannounce } state = kQueued;
  int cache_id = -1;
  std::vector<size_t> rows_per_rank;
  std::vector<char> output;  // kept output (allgatherv, alltoall without a recv buffer)
  int join_last = -1;
  double submitted = 0;
};

struct Engine::Entry {
  uint64_t seq = 0;
  double first = 0;
  std::vector<std::optional<Spec>> per_rank;
};

struct Engine::CacheSlot {
  int id = -1;
  Spec spec;
  uint64_t lru = 0;
};

struct Engine::Response {
  std::string name;
  Spec spec;
  std::vector<Spec> per_rank;  // row-shaped kinds: every rank's spec
  Status status;
  bool from_cache = false;
};

Engine::Engine(Ring* ring, EngineOptions opts) : ring_(ring), opts_(std::move(opts)) {
  // Bounded so that a message's eager section (at most 4 times it) keeps to its 32-bit length.
  opts_.eager_bytes = std::min<size_t>(opts_.eager_bytes, size_t{1} << 28);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  joined_.assign(opts_.size, false);
  thread_ = std::thread([this] { background(); });
}

Engine::~Engine() {
  stop("the engine was destroyed");
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

static void signal_fd(int fd) {
  uint64_t one = 1;
  ssize_t n = ::write(fd, &one, sizeof one);
  (void)n;
}

static void futex_wake_all(std::atomic<uint32_t>* w) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

namespace {
thread_local bool t_caller_waits = false;
}
Engine::CallerWaits::CallerWaits() { t_caller_waits = true; }
Engine::CallerWaits::~CallerWaits() { t_caller_waits = false; }

Result<hvd_handle_t> Engine::submit(Request r) {
  std::shared_ptr<Op> op;
  std::string fatal;  // reported once the lock is released
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (broken_ || stopping_) {
      Error e{broken_reason_.empty() ? "the engine is stopped" : broken_reason_, broken_code_};
      if (!peer_left_.empty() && !peer_left_reported_ && !stopping_) {
        // A peer left (hvd_shutdown) between this rank's collectives, and this rank goes on
        // with another: the peer submitted fewer, and is the job's failure, as when this
        // rank was already waiting on it.
        peer_left_reported_ = true;
        fatal = peer_left_ + " called hvd_shutdown before this rank submitted '" + r.spec.name + "' (rank " +
                std::to_string(peer_left_rank_) + " submitted fewer collectives than this rank)";
      }
      lk.unlock();
      if (!fatal.empty() && opts_.on_fatal) opts_.on_fatal(fatal);
      return e;
    }
    if (auto head = local_.find(r.spec.name); head != local_.end()) {
      if (r.spec.kind == OpKind::kJoin || submitted_pending(r.spec.name, *head->second))
        return refuse_duplicate(std::move(r));
      // Only refusals are pending under the name: this request pairs after them.
      op = std::make_shared<Op>();
      op->handle = next_handle_++;
      op->req = std::move(r);
      op->submitted = now_s();
      ops_[op->handle] = op;
      behind_[op->req.spec.name].push_back(op);
      return op->handle;
    }
    op = std::make_shared<Op>();
    op->handle = next_handle_++;
    op->req = std::move(r);
    op->submitted = now_s();
    ops_[op->handle] = op;
    local_[op->req.spec.name] = op;
    queue_.push_back(op);
    if (opts_.timeline) opts_.timeline->phase(op->req.spec.name, "QUEUE");
  }
  // A thread that drives (runs cycles in wait()) takes it in its next cycle. The background
  // thread is not called out of its pause (park(), for park_idle after a wait): in a loop of
  // submit and wait (a training step's synchronize, hvd_allreduce_async + hvd_wait) the wait
  // comes next and drives, and the background thread, woken here, took the cycle first and
  // handed the result across threads: 20 us for a 4 KiB allreduce, not 2.5, with the
  // threads on different cores (calling it out after a grace cost the same). A poll ends the
  // pause; otherwise the pause looks for pending requests at its end, so a request nobody
  // waits for or polls starts at most park_idle late.
  if (!t_caller_waits) wake(/*unpark=*/false);
  return op->handle;
}

bool Engine::submitted_pending(const std::string& name, const Op& head) const {
  if (!head.req.spec.refused) return true;
  auto b = behind_.find(name);
  if (b == behind_.end()) return false;
  return std::any_of(b->second.begin(), b->second.end(), [](auto& op) { return !op->req.spec.refused; });
}

Error Engine::refuse_duplicate(Request r) {
  Error e{"rank " + std::to_string(opts_.rank) + ": " + op_kind_name(r.spec.kind) + " '" + r.spec.name +
              "': a request with this name is already pending (names must be unique among pending operations; "
              "the request each other rank pairs with this one fails too)",
          HVD_ERR_INVALID_ARGUMENT};
  if (r.spec.kind == OpKind::kJoin) return e;
  // The refusal takes the place of this submission: the k-th submission of a name pairs
  // with the k-th everywhere, so the other ranks learn of it as this rank's announcement.
  auto op = std::make_shared<Op>();
  op->req.spec = std::move(r.spec);
  op->req.spec.refused = true;
  op->submitted = now_s();
  behind_[op->req.spec.name].push_back(std::move(op));
  return e;
}

Result<hvd_handle_t> Engine::join() {
  Request r;
  r.spec.kind = OpKind::kJoin;
  r.spec.name = "join";
  return submit(std::move(r));
}

std::shared_ptr<Engine::Op> Engine::find(hvd_handle_t h) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = ops_.find(h);
  return it == ops_.end() ? nullptr : it->second;
}

int Engine::poll(hvd_handle_t h) {
  auto op = find(h);
  if (!op) return -1;
  std::lock_guard<std::mutex> lk(mu_);
  if (op->done) return 1;
  // Polled, not waited for: nobody drives it, so the background thread's pause after a
  // wait ends now rather than at its next look (see submit).
  if (parked_) {
    kicked_ = true;
    park_cv_.notify_one();
  }
  return 0;
}

void Engine::release(hvd_handle_t h) {
  std::lock_guard<std::mutex> lk(mu_);
  ops_.erase(h);
}

static Error unknown_handle(hvd_handle_t h) {
  return Error{"unknown handle " + std::to_string(h) + " (never returned, or already waited for)",
               HVD_ERR_INVALID_ARGUMENT};
}

Status Engine::wait(hvd_handle_t h) {
  auto op = find(h);
  if (!op) return unknown_handle(h);
  Status s = wait_done(op);
  release(h);
  return s;
}

Status Engine::result_rows(hvd_handle_t h, std::vector<size_t>* rows) {
  auto op = find(h);
  if (!op) return unknown_handle(h);
  Status s = wait_done(op);
  if (s) *rows = op->rows_per_rank;
  return s;
}

Status Engine::wait_result(hvd_handle_t h, void* recv) {
  auto op = find(h);
  if (!op) return unknown_handle(h);
  Status s = wait_done(op);
  release(h);
  if (s && !op->output.empty()) {
    if (!recv) return Error{"hvd_wait_result: recvbuf is null but the operation has output", HVD_ERR_INVALID_ARGUMENT};
    if (op->req.spec.device) {
      auto g = opts_.gpu ? opts_.gpu() : Result<GpuCollectives*>(Error{"no GPU", HVD_ERR_UNSUPPORTED});
      if (!g) return g.error();
      return (*g)->copy_to_device(recv, op->output.data(), op->output.size());
    }
    std::memcpy(recv, op->output.data(), op->output.size());
  }
  return s;
}

Status Engine::wait_join(hvd_handle_t h, int* last_joined) {
  auto op = find(h);
  if (!op) return unknown_handle(h);
  Status s = wait_done(op);
  release(h);
  if (s) *last_joined = op->join_last;
  return s;
}

// Only the thread holding drive_mu_ runs cycles and reads the ring. The background thread
// holds it only while it runs cycles: it waits for work without it (Ring::watch_left), so a
// thread in wait() on an idle engine takes drive_mu_ at once and runs its own cycles, with no
// hand-off between threads on the way (each costs a wake-up, tens of microseconds when the
// threads are on different cores). When the background thread is running cycles, the waiter
// asks for drive_mu_ (want_drive_ and a wake) and waits until it is handed back or its
// operation is done.
Status Engine::wait_done(const std::shared_ptr<Op>& op) {
  ++want_drive_;
  bool woken = false;
  Status result;
  for (;;) {
    uint64_t seen;  // hand-backs counted before the try_lock: one after it is not missed
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (op->done) {
        result = op->status;
        break;
      }
      if (quit_) {
        result = Error{broken_reason_.empty() ? "hvd_shutdown was called" : broken_reason_, broken_code_};
        break;
      }
      seen = drive_releases_;
    }
    std::unique_lock<std::mutex> d(drive_mu_, std::try_to_lock);
    if (d.owns_lock()) {
      drive([&] { return op->done.load() || quit_.load(); }, true);
      d.unlock();
      std::lock_guard<std::mutex> lk(mu_);
      ++drive_releases_;
      done_cv_.notify_all();
      if (op->done) {  // (the usual way out: the one lock taken after the cycles)
        --want_drive_;
        return op->status;
      }
      continue;
    }
    // Another thread runs the cycles: it says when ours is done, or when it lets go.
    if (!woken) {
      wake();  // out of a cycle-time wait, if it is in one
      woken = true;
    }
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait_for(lk, std::chrono::milliseconds(100),
                      [&] { return op->done || quit_.load() || drive_releases_ != seen; });
  }
  std::lock_guard<std::mutex> lk(mu_);
  --want_drive_;
  done_cv_.notify_all();
  return result;
}

void Engine::background() {
  while (!quit_) {
    if (want_drive_.load() > 0) {
      park();
      continue;
    }
    uint32_t seen = wake_word_.load();  // before looking for work: a wake after it is not lost
    bool pending;
    {
      std::unique_lock<std::mutex> d(drive_mu_, std::try_to_lock);
      if (!d.owns_lock()) continue;  // a waiter (want_drive_ > 0) or stop() has it
      drive([this] { return quit_.load() || want_drive_.load() > 0; }, false);
      pending = !table_.empty();  // the driver's state: read under drive_mu_
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (want_drive_.load() > 0) {
        ++drive_releases_;
        done_cv_.notify_all();
        continue;
      }
      if (broken_) break;
      pending = pending || !local_.empty();
    }
    // Idle: sleep until local work, a waiter's wake, or a peer's cycle. With requests
    // pending, look again now and then (the stall check).
    event_waiters_.fetch_add(1);
    ring_->watch_left(wake_fd_, &wake_word_, seen, pending ? 200 : -1);
    event_waiters_.fetch_sub(1);
    uint64_t v;
    ssize_t r = ::read(wake_fd_, &v, sizeof v);  // non-blocking: drain
    (void)r;
  }
}

// While threads in wait() run the cycles, the background thread stays off the ring (their
// peers' messages would wake it for nothing), and for park_idle after the last one left: a
// loop of blocking calls comes straight back. A poll or stop() ends the pause at once; a
// submit does not (see there): a request pending at its end is driven then. Otherwise the
// pause delays only a peer's cycle that this rank has nothing for: it would join with an
// empty message, and whatever that cycle could complete needs this rank's request.
void Engine::park() {
  std::unique_lock<std::mutex> lk(mu_);
  parked_ = true;
  auto idle_since = std::chrono::steady_clock::now();
  while (!quit_ && !kicked_) {
    auto now = std::chrono::steady_clock::now();
    if (want_drive_.load() > 0)
      idle_since = now;
    else if (now - idle_since >= opts_.park_idle)
      break;
    park_cv_.wait_for(lk, opts_.park_idle - (now - idle_since));
  }
  kicked_ = false;
  parked_ = false;
}

void Engine::wake(bool unpark) {
  // The word first: a waiter whose eventfd another thread drained still sees it moved.
  // The system calls only when a thread waits (or is about to): it counts itself in
  // event_waiters_ before it looks at the word, so either it sees the word moved or we see
  // it counted (both sequentially consistent). Each call costs a microsecond or two, and a
  // submit made them with nobody waiting (its wait() came next).
  wake_word_.fetch_add(1);
  if (event_waiters_.load() > 0) {
    futex_wake_all(&wake_word_);
    signal_fd(wake_fd_);
  }
  if (!unpark) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (parked_) {
    kicked_ = true;
    park_cv_.notify_one();
  }
}

int Engine::work_now() {
  if (ring_->left_readable()) return 2;
  std::lock_guard<std::mutex> lk(mu_);
  if (broken_) return 0;
  if (!queue_.empty()) return 1;
  for (auto& [name, op] : local_)
    if (op->state == Op::kReannounce) return 1;
  return invalidate_.empty() ? 0 : 1;
}

void Engine::wait_for_event(int timeout_ms) {
  // Seen before looking at the queue (by our caller), so that a wake in between is not lost.
  event_waiters_.fetch_add(1);
  ring_->wait_left(wake_fd_, &wake_word_, wake_seen_, timeout_ms);
  event_waiters_.fetch_sub(1);
  uint64_t v;
  ssize_t r = ::read(wake_fd_, &v, sizeof v);  // non-blocking: drain
  (void)r;
  wake_seen_ = wake_word_.load();
}

void Engine::drive(const std::function<bool()>& stop_when, bool block) {
  for (;;) {
    if (stop_when() || broken_) return;
    check_stall();
    if (int why = work_now()) {
      if (why == 1 && last_cycle_idle_ && opts_.cycle_ms > 0) {
        // The last cycle found nothing ready: give new requests HVDRUN_CYCLE_TIME to
        // gather (a peer's cycle still starts ours at once).
        double left_ms = (last_cycle_end_ + opts_.cycle_ms / 1000 - now_s()) * 1000;
        if (left_ms > 0) {
          wait_for_event(static_cast<int>(std::ceil(left_ms)));
          if (work_now() != 2 && (last_cycle_end_ + opts_.cycle_ms / 1000 - now_s()) > 0) continue;
        }
      }
      if (auto s = cycle(); !s) fail_all(s.error());
      continue;
    }
    if (!block) return;
    wait_for_event(200);
  }
}

void Engine::build_message(std::string* out) {
  CycleMessage m;
  m.bits.swap(bits_scratch_);  // (its capacity, from cycle to cycle)
  m.bits.clear();
  std::vector<std::shared_ptr<Op>>& fresh = fresh_scratch_;  // swapped with queue_: both keep a capacity
  fresh.clear();
  bool leaving;
  std::vector<Op*> full_ops;  // whose specs go in full, as m.specs
  {
    std::lock_guard<std::mutex> lk(mu_);
    fresh.swap(queue_);
    leaving = stopping_;
    for (auto& [name, op] : local_)
      if (op->state == Op::kReannounce) {
        op->state = Op::kFull;
        m.specs.push_back(op->req.spec);
        full_ops.push_back(op.get());
      }
  }
  for (auto& op : fresh) {
    const Spec& s = op->req.spec;
    if (s.kind == OpKind::kJoin) {
      join_op_ = op;
      op->state = Op::kFull;
      continue;
    }
    auto it = cache_.find(s.name);
    if (it != cache_.end() && !s.refused && it->second.spec.same_as(s)) {
      op->state = Op::kCached;
      op->cache_id = it->second.id;
    } else {
      if (it != cache_.end()) invalidate_.push_back(s.name);
      op->state = Op::kFull;
      m.specs.push_back(s);
      full_ops.push_back(op.get());
    }
    if (opts_.timeline) {
      opts_.timeline->phase(s.name, std::string("NEGOTIATE_") + op_kind_name(s.kind));
    }
  }
  if (join_op_) m.flags |= kFlagJoined;
  if (leaving) m.flags |= kFlagLeaving;
  {
    std::lock_guard<std::mutex> lk(mu_);
    // What the peers know of ours after this message: requests submitted after the swap
    // above are still kQueued and do not count (see last_cycle_idle_).
    announced_ = join_op_ != nullptr;
    completions_at_message_ = completions_;
    for (auto& [name, op] : local_)
      if (op->state != Op::kQueued) announced_ = true;
    for (auto& [name, op] : local_)
      if (op->state == Op::kCached) {
        size_t id = static_cast<size_t>(op->cache_id);
        set_bit(&m.bits, id);
      }
  }
  m.invalid.swap(invalidate_);
  // The header is written apart and copied in front of the eager data: `out` keeps its size
  // from the last cycle, so that the eager section (the same size in steady state) is not
  // zero-filled before it is overwritten.
  // The eager data goes straight into the message (8-byte aligned in it), prescaled: the
  // cached requests' (eager_layout), then those announced in full, in their order.
  const EagerLayout* layout = opts_.size > 1 ? &eager_layout(m.bits) : nullptr;
  const size_t cached_total = layout ? layout->total : 0;
  size_t total = cached_total;
  std::vector<std::pair<size_t, Op*>> full_at;
  for (size_t i = 0; i < m.specs.size(); ++i)
    if (size_t at = place_eager(m.specs[i], &total); at != EagerLayout::kNotEager) full_at.emplace_back(at, full_ops[i]);
  std::string& head = head_scratch_;
  head.clear();
  encode_header(m, static_cast<uint32_t>(total), &head);
  const size_t base = eager_start(Ring::kFrameBytes + head.size());  // room for allgather_bytes' length first
  out->resize(base + total);
  std::memset(out->data(), 0, Ring::kFrameBytes);
  std::memcpy(out->data() + Ring::kFrameBytes, head.data(), head.size());
  std::memset(out->data() + Ring::kFrameBytes + head.size(), 0, base - Ring::kFrameBytes - head.size());
  // Every tensor's place is written below; the alignment gaps between them are never read.
  auto copy_in = [&](const Op& op, size_t off) {
    const Spec& sp = op.req.spec;
    const auto dt = static_cast<hvd_dtype_t>(sp.dtype);
    for (size_t k = 0; k < sp.counts.size(); ++k) {
      scale_copy(out->data() + off, op.req.tensors[k].send, sp.counts[k], dt, sp.prescale, 1);
      off += sp.counts[k] * dtype_size(dt);
    }
  };
  for (auto& [at, op] : full_at) copy_in(*op, base + at);
  if (cached_total) {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [name, op] : local_) {
      if (op->state != Op::kCached) continue;
      size_t at = layout->offset(static_cast<size_t>(op->cache_id));
      if (at != EagerLayout::kNotEager) copy_in(*op, base + at);
    }
  }
  fresh.clear();  // (the ops are held by local_ and ops_; the vector keeps its capacity)
  bits_scratch_.swap(m.bits);
}

size_t Engine::place_eager(const Spec& sp, size_t* end) const {
  const size_t limit = opts_.eager_bytes;
  if (sp.kind != OpKind::kAllreduce || sp.device || sp.refused || !sp.dtypes.empty() || opts_.size < 2 || limit == 0)
    return EagerLayout::kNotEager;
  // Every rank receives the others' copies: (n - 1) times the bytes, against the ring
  // allreduce's 2 (n - 1) / n (in more steps). The limits bound what each rank receives.
  const size_t others = static_cast<size_t>(opts_.size - 1);
  const size_t es = dtype_size(static_cast<hvd_dtype_t>(sp.dtype));
  size_t bytes = 0;
  for (auto c : sp.counts) {
    if (c > limit) return EagerLayout::kNotEager;
    bytes += c * es;
  }
  size_t at = (*end + 7) & ~size_t{7};  // each tensor's data 8-byte aligned for the reduction
  if (bytes == 0 || bytes * others > limit || (at + bytes) * others > 4 * limit) return EagerLayout::kNotEager;
  *end = at + bytes;
  return at;
}

void Engine::compute_eager_layout(const std::vector<uint64_t>& bits, EagerLayout* out) const {
  out->bits = bits;
  out->cache_epoch = cache_epoch_;
  out->at.clear();
  size_t total = 0;
  for (size_t w = 0; w < bits.size(); ++w)
    for (uint64_t word = bits[w]; word; word &= word - 1) {
      const size_t id = w * 64 + static_cast<size_t>(__builtin_ctzll(word));
      if (id >= cache_ids_.size() || cache_ids_[id].empty()) continue;
      size_t at = place_eager(cache_.at(cache_ids_[id]).spec, &total);
      if (at != EagerLayout::kNotEager) out->at.emplace_back(id, at);
    }
  out->total = total;
}

size_t Engine::EagerLayout::offset(size_t id) const {
  auto it = std::lower_bound(at.begin(), at.end(), std::make_pair(id, size_t{0}));
  return it != at.end() && it->first == id ? it->second : kNotEager;
}

const Engine::EagerLayout& Engine::eager_layout(const std::vector<uint64_t>& bits) {
  if (!eager_memo_.holds(bits, cache_epoch_)) compute_eager_layout(bits, &eager_memo_);
  return eager_memo_;
}

Status Engine::cycle() {
  if (opts_.timeline && opts_.timeline->mark_cycles()) opts_.timeline->instant("CYCLE_START");
  std::vector<std::string>& all = cycle_msgs_;  // reused: the strings keep their capacity
  all.resize(static_cast<size_t>(opts_.size));
  build_message(&all[static_cast<size_t>(opts_.rank)]);
  if (auto s = ring_->allgather_bytes(&all); !s) return s;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.cycles;
  }
  return process(all);
}

std::string Engine::describe_mismatch(const std::string& name, const std::vector<const Spec*>& specs) {
  // For the first field that differs: each value with the ranks that gave it.
  struct Field {
    const char* what;
    std::function<std::string(const Spec&)> get;
  };
  const Spec* base = nullptr;
  for (auto* s : specs)
    if (s) {
      base = s;
      break;
    }
  const bool several = std::any_of(specs.begin(), specs.end(), [](const Spec* s) { return s && !s->dtypes.empty(); });
  std::vector<Field> fields = {
      {"operation", [](const Spec& s) { return std::string(op_kind_name(s.kind)); }},
      {"memory", [](const Spec& s) { return std::string(s.device ? "device" : "host"); }},
      {"dtype", [several](const Spec& s) { return dtypes_label(s, several); }},
      {"reduction op", [](const Spec& s) { return std::string(op_name(static_cast<hvd_op_t>(s.op))); }},
      {"root rank", [](const Spec& s) { return std::to_string(s.root); }},
      {"prescale factor", [](const Spec& s) { return fmt_double(s.prescale); }},
      {"postscale factor", [](const Spec& s) { return fmt_double(s.postscale); }},
      {"number of tensors", [](const Spec& s) { return std::to_string(s.counts.size()); }},
      {"elements per row", [](const Spec& s) { return std::to_string(s.row_elems); }},
  };
  if (base && !per_rank_rows(base->kind))
    fields.push_back({base->kind == OpKind::kReducescatter ? "rows" : "count",
                      [](const Spec& s) { return s.counts.size() == 1 ? std::to_string(s.counts[0]) : join_u64(s.counts); }});
  for (auto& f : fields) {
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (size_t r = 0; r < specs.size(); ++r) {
      if (!specs[r]) continue;
      std::string v = f.get(*specs[r]);
      auto g = std::find_if(groups.begin(), groups.end(), [&](auto& x) { return x.first == v; });
      if (g == groups.end()) groups.push_back({v, {static_cast<int>(r)}});
      else g->second.push_back(static_cast<int>(r));
    }
    if (groups.size() < 2) continue;
    std::string msg = std::string(op_kind_name(base->kind)) + " '" + name + "': mismatched " + f.what + ":";
    for (size_t i = 0; i < groups.size(); ++i) {
      msg += (i ? ";" : "") + std::string(" ") + groups[i].first + " on rank" + (groups[i].second.size() > 1 ? "s " : " ");
      for (size_t k = 0; k < groups[i].second.size(); ++k) msg += (k ? "," : "") + std::to_string(groups[i].second[k]);
    }
    return msg;
  }
  return "";
}

std::string Engine::oldest_pending_name() {
  std::lock_guard<std::mutex> lk(mu_);
  const Op* oldest = nullptr;
  for (auto& [name, op] : local_)
    if (op->req.spec.kind != OpKind::kJoin && !op->req.spec.refused && (!oldest || op->submitted < oldest->submitted)) oldest = op.get();
  return oldest ? oldest->req.spec.name : "";
}

Status Engine::process(const std::vector<std::string>& raw) {
  const int n = opts_.size;
  std::vector<CycleMessage>& msgs = cycle_parsed_;  // reused: their vectors keep their capacity
  msgs.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    if (!decode_message(raw[r], Ring::kFrameBytes, &msgs[r]))
      return Error{"rank " + std::to_string(opts_.rank) + ": malformed negotiation message from rank " + std::to_string(r),
                   HVD_ERR_INTERNAL};
  // Where each rank's eager data lies: from the cache as it was when the messages were
  // built. In steady state every rank sends the same bits: one (kept) layout for all.
  std::vector<const EagerLayout*>& eager_at = eager_at_;
  eager_at.assign(static_cast<size_t>(n), nullptr);
  std::vector<EagerLayout>& other_layouts = other_layouts_;  // eager_at points into it: reserved before use
  other_layouts.clear();
  for (int r = 0; r < n; ++r) {
    if (msgs[r].eager.empty()) continue;
    for (int q = 0; q < r && !eager_at[r]; ++q)
      if (eager_at[q] && msgs[q].bits == msgs[r].bits) eager_at[r] = eager_at[q];
    if (eager_at[r]) continue;
    if (eager_memo_.holds(msgs[r].bits, cache_epoch_)) {
      eager_at[r] = &eager_memo_;
    } else {
      if (other_layouts.empty()) other_layouts.reserve(static_cast<size_t>(n));
      compute_eager_layout(msgs[r].bits, &other_layouts.emplace_back());
      eager_at[r] = &other_layouts.back();
    }
  }
  // The data of requests announced in full, after the cached ones (as build_message put
  // it): by name, each rank's (null where a rank sent none).
  std::unordered_map<std::string, std::vector<const char*>> fresh_data;
  for (int r = 0; r < n; ++r) {
    if (!eager_at[r]) continue;
    size_t end = eager_at[r]->total;
    for (auto& sp : msgs[r].specs) {
      size_t at = place_eager(sp, &end);
      if (at == EagerLayout::kNotEager) continue;
      auto& d = fresh_data[sp.name];
      d.resize(n, nullptr);
      d[r] = msgs[r].eager.data() + at;
    }
    if (end != msgs[r].eager.size())
      return Error{"rank " + std::to_string(opts_.rank) + ": negotiation message from rank " + std::to_string(r) +
                       " holds " + std::to_string(msgs[r].eager.size()) + " bytes of eager data, not " +
                       std::to_string(end),
                   HVD_ERR_INTERNAL};
  }
  // A rank that leaves (hvd_shutdown) ends the job's collectives for everyone.
  for (int r = 0; r < n; ++r)
    if (msgs[r].flags & kFlagLeaving) {
      std::string host = r < static_cast<int>(opts_.hosts.size()) ? " (host " + opts_.hosts[r] + ")" : "";
      if (r == opts_.rank) return Error{"hvd_shutdown was called with this operation pending", HVD_ERR_PEER};
      std::string who = "rank " + std::to_string(r) + host;
      // This rank still waits on the one that left: that rank is the job's failure (it
      // submitted fewer collectives than this one), whatever this rank then does.
      if (std::string pending = oldest_pending_name(); !pending.empty()) {
        if (opts_.on_fatal)
          opts_.on_fatal(who + " called hvd_shutdown while this rank still waited on it in '" + pending + "' (rank " +
                         std::to_string(r) + " submitted fewer collectives than this rank)");
      } else {
        // Nothing pending here yet: the proof comes with this rank's next collective (submit).
        std::lock_guard<std::mutex> lk(mu_);
        peer_left_ = who;
        peer_left_rank_ = r;
      }
      return Error{who + " called hvd_shutdown; collectives with it are over", HVD_ERR_PEER};
    }
  for (int r = 0; r < n; ++r)
    if ((msgs[r].flags & kFlagJoined) && !joined_[r]) {
      joined_[r] = true;
      last_joined_ = r;
    }
  int active = 0;
  for (int r = 0; r < n; ++r) active += joined_[r] ? 0 : 1;

  auto drop_cached = [&](std::string name) {  // a copy: it may be the erased key itself
    auto it = cache_.find(name);
    if (it == cache_.end()) return;
    cache_ids_[it->second.id].clear();
    cache_.erase(it);
    ++cache_epoch_;
    std::lock_guard<std::mutex> lk(mu_);
    auto l = local_.find(name);
    if (l != local_.end() && l->second->state == Op::kCached) {
      l->second->state = Op::kReannounce;
      l->second->cache_id = -1;
    }
  };
  // Invalidations first: their bits in this cycle mean nothing.
  std::set<std::string> invalid;
  for (auto& m : msgs)
    for (auto& name : m.invalid) invalid.insert(name);
  for (auto& name : invalid) {
    if (cache_.count(name)) {
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.cache_invalidations;
    }
    drop_cached(name);
  }

  std::vector<Response> responses;
  // Cached requests ready on every active rank, by id. Only the ids some active rank sent
  // are looked at (a cache holds many idle names: they cost nothing here).
  if (active > 0) {
    auto sent_by_active = [&](size_t id) {
      int sent = 0;
      for (int r = 0; r < n; ++r) sent += !joined_[r] && bit(msgs[r].bits, id);
      return sent;
    };
    // For the stall check: cached names some ranks have sent and others not. A name no
    // rank sends any more is no longer partial.
    for (auto it = cached_partial_.begin(); it != cached_partial_.end();) {
      auto c = cache_.find(it->first);
      if (c == cache_.end() || sent_by_active(static_cast<size_t>(c->second.id)) == 0)
        it = cached_partial_.erase(it);
      else
        ++it;
    }
    size_t words = 0;
    for (int r = 0; r < n; ++r)
      if (!joined_[r]) words = std::max(words, msgs[r].bits.size());
    for (size_t w = 0; w < words; ++w) {
      uint64_t any = 0;
      for (int r = 0; r < n; ++r)
        if (!joined_[r] && w < msgs[r].bits.size()) any |= msgs[r].bits[w];
      for (; any; any &= any - 1) {
        const size_t id = w * 64 + static_cast<size_t>(__builtin_ctzll(any));
        if (id >= cache_ids_.size() || cache_ids_[id].empty()) continue;
        if (sent_by_active(id) < active) {
          std::vector<int> missing;
          for (int r = 0; r < n; ++r)
            if (!joined_[r] && !bit(msgs[r].bits, id)) missing.push_back(r);
          auto [it, fresh] = cached_partial_.try_emplace(cache_ids_[id]);
          if (fresh) it->second.first = now_s();
          it->second.second = std::move(missing);
          continue;
        }
        if (!cached_partial_.empty()) cached_partial_.erase(cache_ids_[id]);
        if (active == n && run_eager(id, msgs, eager_at)) continue;
        Response resp;
        resp.name = cache_ids_[id];
        resp.spec = cache_.at(resp.name).spec;
        resp.from_cache = true;
        responses.push_back(std::move(resp));
      }
    }
  }
  // Full announcements into the table (with, for this cycle, where each rank's eager data is).
  double t = now_s();
  for (int r = 0; r < n; ++r)
    for (const Spec& s : msgs[r].specs) {
      auto [it, fresh] = table_.try_emplace(s.name);
      if (fresh) {
        it->second.seq = next_seq_++;
        it->second.first = t;
        it->second.per_rank.assign(n, std::nullopt);
        {
          std::lock_guard<std::mutex> lk(mu_);
          ++stats_.cache_misses;
        }
      }
      it->second.per_rank[r] = s;
    }
  // Table entries every active rank announced, in announcement order.
  std::vector<std::pair<uint64_t, std::string>> ready;
  if (active > 0)
    for (auto& [name, e] : table_) {
      bool all = true;
      for (int r = 0; r < n && all; ++r)
        if (!joined_[r] && !e.per_rank[r]) all = false;
      if (all) ready.push_back({e.seq, name});
    }
  std::sort(ready.begin(), ready.end());
  std::vector<Response> ran_eagerly;  // done in this loop; cached after the others
  for (auto& [seq, name] : ready) {
    Entry e = std::move(table_.at(name));
    table_.erase(name);
    Response resp;
    resp.name = name;
    std::vector<const Spec*> specs(n, nullptr);
    for (int r = 0; r < n; ++r)
      if (e.per_rank[r]) specs[r] = &*e.per_rank[r];
    const Spec* base = nullptr;
    for (auto* s : specs)
      if (s && !base) base = s;
    resp.spec = *base;
    std::string refusers;
    for (int r = 0; r < n; ++r)
      if (specs[r] && specs[r]->refused) refusers += (refusers.empty() ? "" : ",") + std::to_string(r);
    std::string mismatch = refusers.empty() ? describe_mismatch(name, specs) : "";
    if (!refusers.empty()) {
      resp.status = Error{std::string(op_kind_name(base->kind)) + " '" + name + "': refused on rank" +
                              (refusers.find(',') == std::string::npos ? " " : "s ") + refusers +
                              ", where it was submitted again while pending (names must be unique among pending "
                              "operations; the k-th submission of a name pairs with the k-th on every rank)",
                          HVD_ERR_INVALID_ARGUMENT};
    } else if (!mismatch.empty()) {
      resp.status = Error{mismatch, HVD_ERR_MISMATCH};
    } else if (active < n && base->kind != OpKind::kAllreduce && base->kind != OpKind::kBarrier) {
      std::string who;
      for (int r = 0; r < n; ++r)
        if (joined_[r]) who += (who.empty() ? "" : ",") + std::to_string(r);
      resp.status = Error{std::string(op_kind_name(base->kind)) + " '" + name +
                              "' is not supported while ranks have joined (joined: " + who + ")",
                          HVD_ERR_INVALID_ARGUMENT};
    } else if (auto f = fresh_data.find(name);
               active == n && f != fresh_data.end() && std::find(f->second.begin(), f->second.end(), nullptr) == f->second.end()) {
      // Every rank announced it in this cycle, with its data: done here, one exchange.
      reduce_eagerly(name, *base, f->second);
      ran_eagerly.push_back(std::move(resp));
      continue;
    } else if (per_rank_rows(base->kind)) {
      for (int r = 0; r < n; ++r) {
        if (!specs[r]) {  // a joined rank: nothing from it (refused above, kept for safety)
          Spec z = *base;
          z.counts = {0};
          z.splits.assign(n, 0);
          resp.per_rank.push_back(z);
        } else {
          resp.per_rank.push_back(*specs[r]);
        }
      }
    }
    responses.push_back(std::move(resp));
  }
  size_t from_cache = 0;
  for (auto& r : responses) from_cache += r.from_cache ? 1 : 0;

  execute(responses);
  last_cycle_end_ = now_s();
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.cache_hits += from_cache;
    // Idle means: nothing finished (negotiated or eager) although this rank had announced requests. A request that
    // arrived during the cycle (still kQueued) does not make it idle: counting it would let
    // both ranks hold new work waiting for the other's cycle for a whole cycle time.
    last_cycle_idle_ = announced_ && completions_ == completions_at_message_;
    if (broken_) return {};
  }
  // Cache what ran (every rank inserts in this order, so ids agree).
  for (auto& r : ran_eagerly) responses.push_back(std::move(r));
  if (opts_.cache_capacity > 0)
    for (auto& r : responses) {
      if (!r.status || !cacheable(r.spec.kind)) continue;
      auto it = cache_.find(r.name);
      if (it != cache_.end()) {
        it->second.lru = ++lru_clock_;
        continue;
      }
      if (cache_.size() >= opts_.cache_capacity) {
        auto victim = std::min_element(cache_.begin(), cache_.end(),
                                       [](auto& a, auto& b) { return a.second.lru < b.second.lru; });
        drop_cached(victim->first);
      }
      int id = 0;
      while (id < static_cast<int>(cache_ids_.size()) && !cache_ids_[id].empty()) ++id;
      if (id == static_cast<int>(cache_ids_.size())) cache_ids_.emplace_back();
      cache_ids_[id] = r.name;
      cache_[r.name] = CacheSlot{id, r.spec, ++lru_clock_};
      ++cache_epoch_;
    }
  // Join: done when every rank has joined.
  if (active == 0) {
    if (join_op_) {
      join_op_->join_last = last_joined_;
      complete("join", {});
      join_op_.reset();
    }
    joined_.assign(n, false);
  }
  return {};
}

bool Engine::run_eager(size_t id, const std::vector<CycleMessage>& msgs, const std::vector<const EagerLayout*>& eager_at) {
  const int n = opts_.size;
  for (int r = 0; r < n; ++r)
    if (!eager_at[r] || eager_at[r]->offset(id) == EagerLayout::kNotEager) return false;
  const std::string& name = cache_ids_[id];  // (nothing below changes the cache's names)
  CacheSlot& slot = cache_.at(name);
  const Spec& sp = slot.spec;
  slot.lru = ++lru_clock_;
  std::vector<const char*>& data = eager_ptrs_;
  data.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) data[r] = msgs[r].eager.data() + eager_at[r]->offset(id);
  reduce_eagerly(name, sp, data, /*cache_hit=*/true);
  return true;
}

void Engine::reduce_eagerly(const std::string& name, const Spec& sp, const std::vector<const char*>& data,
                            bool cache_hit) {
  const int n = opts_.size;
  const auto dt = static_cast<hvd_dtype_t>(sp.dtype);
  const size_t es = dtype_size(dt);
  size_t total = 0;
  for (auto c : sp.counts) total += c;
  std::shared_ptr<Op> op;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = local_.find(name);
    if (it != local_.end()) op = it->second;
    ++stats_.eager;
    if (cache_hit) ++stats_.cache_hits;
  }
  if (!op) return;  // (every rank announced it, so this rank has it)
  if (opts_.timeline) opts_.timeline->phase(name, "ALLREDUCE");
  auto rop = static_cast<hvd_op_t>(sp.op == HVD_OP_AVERAGE ? static_cast<uint8_t>(HVD_OP_SUM) : sp.op);
  const double div = sp.op == HVD_OP_AVERAGE ? n : 1;
  if (sp.counts.size() == 1 && sp.postscale == 1 && div == 1) {
    // One tensor, nothing to scale: reduce straight into the caller's buffer (its data
    // went into this rank's message, so an in-place call loses nothing).
    void* recv = op->req.tensors[0].recv;
    if (n == 1)
      std::memcpy(recv, data[0], total * es);
    else
      reduce_pair(recv, data[0], data[1], total, dt, rop);
    for (int r = 2; r < n; ++r) reduce_into(recv, data[r], total, dt, rop);
    complete(name, {});
    return;
  }
  eager_acc_.assign(data[0], data[0] + total * es);
  for (int r = 1; r < n; ++r) reduce_into(eager_acc_.data(), data[r], total, dt, rop);
  size_t off = 0;
  for (size_t k = 0; k < sp.counts.size(); ++k) {
    scale_copy(op->req.tensors[k].recv, eager_acc_.data() + off, sp.counts[k], dt, sp.postscale, div);
    off += sp.counts[k] * es;
  }
  complete(name, {});
}

void Engine::execute(std::vector<Response>& responses) {
  if (responses.empty()) return;  // (a cycle whose requests all ran eagerly)
  // Group fusable allreduces (same dtype and reduction, host memory) together, each group
  // where its first member was: every rank reorders the same list the same way.
  {
    auto key = [](const Response& x) -> int {
      if (!x.status || x.spec.kind != OpKind::kAllreduce || x.spec.device || !x.spec.dtypes.empty()) return -1;
      int op = x.spec.op == HVD_OP_AVERAGE ? static_cast<int>(HVD_OP_SUM) : static_cast<int>(x.spec.op);
      return x.spec.dtype * 8 + op;
    };
    std::vector<int> first_at(256, -1);
    std::vector<std::pair<int, size_t>> order;
    for (size_t i = 0; i < responses.size(); ++i) {
      int k = key(responses[i]);
      int pos = static_cast<int>(i);
      if (k >= 0) {
        if (first_at[k] < 0) first_at[k] = pos;
        pos = first_at[k];
      }
      order.push_back({pos, i});
    }
    std::stable_sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first < b.first; });
    std::vector<Response> sorted;
    sorted.reserve(responses.size());
    for (auto& [pos, i] : order) sorted.push_back(std::move(responses[i]));
    responses.swap(sorted);
  }
  const size_t nresp = responses.size();
  size_t i = 0;
  while (i < nresp) {
    Response& r = responses[i];
    if (!r.status) {
      complete(r.name, r.status);
      ++i;
      continue;
    }
    auto fusable = [&](const Response& x) {
      return x.status && x.spec.kind == OpKind::kAllreduce && !x.spec.device && x.spec.dtypes.empty();
    };
    auto reduce_of = [](const Spec& s) { return s.op == HVD_OP_AVERAGE ? static_cast<uint8_t>(HVD_OP_SUM) : s.op; };
    auto bytes_of = [](const Spec& s) {
      size_t b = 0;
      for (auto c : s.counts) b += c * dtype_size(static_cast<hvd_dtype_t>(s.dtype));
      return b;
    };
    // A tensor of 256 KiB or more goes alone, in place: its two copies through the fusion
    // buffer cost more than its own call (hvdrun-engine-bench, ResNet-50's gradients on 2
    // ranks: a step 1.07-1.14x of one fused call with 256 KiB, 1.29-1.30x with 1 MiB over
    // shared memory; 1.06x against 1.14x over TCP).
    constexpr size_t kFuseBelow = 256 << 10;
    if (fusable(r) && opts_.fusion_bytes > 0 && bytes_of(r.spec) <= opts_.fusion_bytes && bytes_of(r.spec) < kFuseBelow) {
      std::vector<Response*> batch{&r};
      size_t total = bytes_of(r.spec), j = i + 1;
      while (j < nresp && fusable(responses[j]) && bytes_of(responses[j].spec) < kFuseBelow &&
             responses[j].spec.dtype == r.spec.dtype &&
             reduce_of(responses[j].spec) == reduce_of(r.spec) && total + bytes_of(responses[j].spec) <= opts_.fusion_bytes) {
        total += bytes_of(responses[j].spec);
        batch.push_back(&responses[j]);
        ++j;
      }
      Status s = run_allreduce_batch(batch);
      if (!s) {
        fail_all(s.error());
        return;
      }
      i = j;
      continue;
    }
    Status s = run_one(r);
    if (!s && (s.error().code == HVD_ERR_PEER || s.error().code == HVD_ERR_TIMEOUT || ring_->broken())) {
      fail_all(s.error());
      return;
    }
    complete(r.name, s);
    ++i;
  }
}

// Several allreduces through the fusion buffer: each tensor is copied in with its prescale,
// the buffer reduced once, and each copied out with its postscale (and 1/size for an
// average). A batch of one tensor runs in place instead.
Status Engine::run_allreduce_batch(std::vector<Response*>& batch) {
  size_t tensors = 0, total = 0;
  const auto dtype = static_cast<hvd_dtype_t>(batch[0]->spec.dtype);
  const size_t es = dtype_size(dtype);
  for (auto* r : batch) {
    tensors += r->spec.counts.size();
    for (auto c : r->spec.counts) total += c;
  }
  if (tensors == 1) {
    Status s = run_one(*batch[0]);
    if (!s && (s.error().code == HVD_ERR_PEER || s.error().code == HVD_ERR_TIMEOUT || ring_->broken())) return s;
    complete(batch[0]->name, s);
    return {};
  }
  std::vector<std::shared_ptr<Op>> ops;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto* r : batch) {
      auto it = local_.find(r->name);
      ops.push_back(it == local_.end() ? nullptr : it->second);
    }
  }
  if (fusion_.size() < total * es) fusion_.resize(total * es);  // at most HVDRUN_FUSION_THRESHOLD
  size_t off = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const Spec& s = batch[b]->spec;
    if (opts_.timeline) opts_.timeline->phase(s.name, "MEMCPY_IN_FUSION_BUFFER");
    for (size_t k = 0; k < s.counts.size(); ++k) {
      const void* src = ops[b] ? ops[b]->req.tensors[k].send : nullptr;
      scale_copy(fusion_.data() + off, src, s.counts[k], dtype, s.prescale, 1);
      off += s.counts[k] * es;
    }
    if (opts_.timeline) opts_.timeline->phase(s.name, "ALLREDUCE");
  }
  auto op = static_cast<hvd_op_t>(batch[0]->spec.op == HVD_OP_AVERAGE ? static_cast<uint8_t>(HVD_OP_SUM) : batch[0]->spec.op);
  Status st = ring_->allreduce(fusion_.data(), fusion_.data(), total, dtype, op);
  if (!st) return st;
  off = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const Spec& s = batch[b]->spec;
    double div = s.op == HVD_OP_AVERAGE ? opts_.size : 1;
    if (opts_.timeline) opts_.timeline->phase(s.name, "MEMCPY_OUT_FUSION_BUFFER");
    for (size_t k = 0; k < s.counts.size(); ++k) {
      if (ops[b]) scale_copy(ops[b]->req.tensors[k].recv, fusion_.data() + off, s.counts[k], dtype, s.postscale, div);
      off += s.counts[k] * es;
    }
    complete(s.name, {});
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.fused_batches;
    stats_.fused_tensors += tensors;
  }
  return {};
}

Status Engine::run_one(Response& r) {
  const Spec& s = r.spec;
  const auto dtype = static_cast<hvd_dtype_t>(s.dtype);
  const size_t es = dtype_size(dtype);
  const int n = opts_.size, me = opts_.rank;
  std::shared_ptr<Op> op;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = local_.find(r.name);
    if (it != local_.end()) op = it->second;
  }
  const char* activity = op_kind_name(s.kind);
  if (opts_.timeline) {
    std::string up = activity;
    for (auto& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    opts_.timeline->phase(s.name, (s.device ? "NCCL_" : "") + up);
  }
  GpuCollectives* gpu = nullptr;
  if (s.device) {
    if (!opts_.gpu) return Error{"device memory but no GPU backend", HVD_ERR_UNSUPPORTED};
    auto g = opts_.gpu();
    if (!g) return g.error();
    gpu = *g;
    if (!op) return Error{std::string(activity) + " '" + s.name + "': device tensors with joined ranks are not supported",
                          HVD_ERR_UNSUPPORTED};
  }
  switch (s.kind) {
    case OpKind::kAllreduce: {
      {
        std::lock_guard<std::mutex> lk(mu_);
        stats_.unfused_tensors += s.counts.size();
      }
      for (size_t k = 0; k < s.counts.size(); ++k) {
        const size_t count = s.counts[k];
        const hvd_dtype_t dtype = s.dtype_at(k);  // (a group of several dtypes: each its own)
        const size_t es = dtype_size(dtype);
        const void* send = op ? op->req.tensors[k].send : nullptr;
        void* recv = op ? op->req.tensors[k].recv : nullptr;
        if (gpu) {
          if (auto st = gpu->allreduce_scaled(send, recv, count, dtype, static_cast<hvd_op_t>(s.op), s.prescale, s.postscale);
              !st)
            return st;
          continue;
        }
        if (!op) {  // joined: contribute zeros
          zeros_.assign(count * es, 0);
          send = recv = zeros_.data();
        }
        if (s.prescale == 1 && s.postscale == 1) {
          if (auto st = ring_->allreduce(send, recv, count, dtype, static_cast<hvd_op_t>(s.op)); !st) return st;
          continue;
        }
        scale_copy(recv, send, count, dtype, s.prescale, 1);
        auto rop = static_cast<hvd_op_t>(s.op == HVD_OP_AVERAGE ? static_cast<uint8_t>(HVD_OP_SUM) : s.op);
        if (auto st = ring_->allreduce(recv, recv, count, dtype, rop); !st) return st;
        scale_copy(recv, recv, count, dtype, s.postscale, s.op == HVD_OP_AVERAGE ? n : 1);
      }
      return {};
    }
    case OpKind::kBroadcast:
      if (gpu) return gpu->broadcast(op->req.tensors[0].recv, s.counts[0], dtype, s.root);
      return ring_->broadcast(op->req.tensors[0].recv, s.counts[0], dtype, s.root);
    case OpKind::kBarrier:
      return ring_->barrier();
    case OpKind::kAllgatherv: {
      std::vector<size_t> bytes(n);
      size_t total = 0;
      op->rows_per_rank.assign(n, 0);
      for (int p = 0; p < n; ++p) {
        op->rows_per_rank[p] = r.per_rank[p].counts[0];
        bytes[p] = r.per_rank[p].counts[0] * s.row_elems * es;
        total += bytes[p];
      }
      void* out = op->req.tensors[0].recv;
      if (gpu) {
        if (!out) {
          op->output.resize(total);
          out = nullptr;
        }
        return gpu->allgatherv(op->req.tensors[0].send, out, bytes, out ? nullptr : &op->output);
      }
      if (!out) {
        op->output.resize(total);
        out = op->output.data();
      }
      return ring_->allgatherv(op->req.tensors[0].send, out, bytes);
    }
    case OpKind::kAlltoall: {
      std::vector<size_t> bytes(static_cast<size_t>(n) * n);
      size_t total = 0;
      op->rows_per_rank.assign(n, 0);
      for (int src = 0; src < n; ++src)
        for (int dst = 0; dst < n; ++dst) {
          bytes[static_cast<size_t>(src) * n + dst] = r.per_rank[src].splits[dst] * s.row_elems * es;
          if (dst == me) {
            op->rows_per_rank[src] = r.per_rank[src].splits[dst];
            total += bytes[static_cast<size_t>(src) * n + dst];
          }
        }
      if (gpu) return gpu->alltoallv(op->req.tensors[0].send, bytes, me, &op->output);
      op->output.resize(total);
      return ring_->alltoallv(op->req.tensors[0].send, op->output.data(), bytes);
    }
    case OpKind::kReducescatter: {
      const size_t rows = s.counts[0], row = s.row_elems;
      auto share = [&](int p) { return rows / n + (static_cast<size_t>(p) < rows % n ? 1 : 0); };
      size_t first = 0;
      for (int p = 0; p < me; ++p) first += share(p);
      if (gpu) return gpu->reducescatter(op->req.tensors[0].send, op->req.tensors[0].recv, rows * row, first * row,
                                         share(me) * row, dtype, static_cast<hvd_op_t>(s.op));
      std::vector<char> tmp(rows * row * es);
      if (auto st = ring_->allreduce(op->req.tensors[0].send, tmp.data(), rows * row, dtype, static_cast<hvd_op_t>(s.op));
          !st)
        return st;
      if (share(me)) std::memcpy(op->req.tensors[0].recv, tmp.data() + first * row * es, share(me) * row * es);
      return {};
    }
    case OpKind::kJoin:
      break;
  }
  return Error{"internal: unexpected response kind", HVD_ERR_INTERNAL};
}

void Engine::complete(const std::string& name, Status s) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = local_.find(name);
  if (it == local_.end()) return;
  auto op = it->second;
  local_.erase(it);
  if (auto b = behind_.empty() ? behind_.end() : behind_.find(name); b != behind_.end()) {
    // The name's next submission (or refusal) takes its place, announced in the next cycle.
    auto next = std::move(b->second.front());
    b->second.pop_front();
    if (b->second.empty()) behind_.erase(b);
    local_[name] = next;
    queue_.push_back(std::move(next));
    wake(/*unpark=*/false);  // (takes no lock of ours)
  }
  ++completions_;
  if (!s) {
    Error e = s.error();
    e.message = "rank " + std::to_string(opts_.rank) + ": " + e.message;
    s = e;
  }
  op->status = s;
  op->done = true;
  if (opts_.timeline) opts_.timeline->done(name);
  done_cv_.notify_all();
}

void Engine::fail_all(const Error& e) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!broken_) {
    broken_ = true;
    broken_reason_ = e.message;
    broken_code_ = e.code;
  }
  std::string prefix = "rank " + std::to_string(opts_.rank) + ": ";
  for (auto& [name, op] : local_) {
    op->status = Error{e.message.rfind(prefix, 0) == 0 ? e.message : prefix + e.message, e.code};
    op->done = true;
  }
  for (auto& op : queue_) {
    op->status = Error{e.message.rfind(prefix, 0) == 0 ? e.message : prefix + e.message, e.code};
    op->done = true;
  }
  for (auto& [name, later] : behind_)
    for (auto& op : later) {
      op->status = Error{e.message.rfind(prefix, 0) == 0 ? e.message : prefix + e.message, e.code};
      op->done = true;
    }
  local_.clear();
  behind_.clear();
  queue_.clear();
  done_cv_.notify_all();
}

void Engine::stop(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  quit_ = true;
  wake();
  {
    std::lock_guard<std::mutex> d(drive_mu_);
    bool broken;
    {
      std::lock_guard<std::mutex> lk(mu_);
      broken = broken_;
    }
    // Tell the others this rank leaves: one last cycle whose message says so.
    if (!broken && opts_.size > 1) (void)cycle();
    fail_all(Error{why, HVD_ERR_PEER});
  }
  wake();
  if (thread_.joinable()) thread_.join();
}

// Rank 0 sees every rank's announcements: names some ranks announced and others not, for
// longer than HVDRUN_STALL_CHECK_TIME_SECONDS, go to hvdrun with the ranks missing.
void Engine::check_stall() {
  if (opts_.stall_check_s <= 0 || !opts_.on_stall) return;
  double t = now_s();
  if (t - last_stall_check_ < std::min(1.0, opts_.stall_check_s / 4)) return;
  last_stall_check_ = t;
  std::map<int, std::vector<std::string>> missing;
  bool fatal = false, any = false;
  for (auto& [name, e] : table_) {
    double age = t - e.first;
    if (age < opts_.stall_check_s) continue;
    any = true;
    if (opts_.stall_shutdown_s > 0 && age >= opts_.stall_shutdown_s) fatal = true;
    for (int r = 0; r < opts_.size; ++r)
      if (!e.per_rank[r] && !joined_[r]) missing[r].push_back(name);
  }
  for (auto& [name, p] : cached_partial_) {
    double age = t - p.first;
    if (age < opts_.stall_check_s || !cache_.count(name)) continue;
    any = true;
    if (opts_.stall_shutdown_s > 0 && age >= opts_.stall_shutdown_s) fatal = true;
    for (int r : p.second) missing[r].push_back(name);
  }
  if (!any) {
    stall_warned_ = false;
    return;
  }
  // Rank 0 warns; any rank ends a job stalled past the shutdown time (rank 0 may be the
  // rank that stalled it: stopped, or hung in the program).
  if (opts_.rank != 0 && !fatal) return;
  if (stall_warned_ && !fatal) return;
  stall_warned_ = true;
  std::string report;
  for (auto& [r, names] : missing) {
    report += "rank " + std::to_string(r);
    if (r < static_cast<int>(opts_.hosts.size())) report += " (host " + opts_.hosts[r] + ")";
    report += " has not submitted:";
    size_t shown = 0;
    for (auto& nm : names) {
      if (shown++ == 6) {
        report += " ... (" + std::to_string(names.size()) + " in all)";
        break;
      }
      report += " " + nm;
    }
    report += "\n";
  }
  opts_.on_stall(report, fatal);
}

}  // namespace hvdrun
