// The collective engine: the queue, the waits and the threads, and the cycle that ties the
// parts in this folder together.
//
// Callers only queue requests (submit) and wait for them. Whichever thread holds
// drive_mu_ runs *cycles*: the background thread when there is work and nobody waits, or a
// thread blocked in wait() on an idle engine (so that a single call costs no hand-off
// between threads). A cycle is one ring allgather of every rank's message
// (cycle_message.h: flags, the bits of pending cached requests, invalidated names, the
// specs of new requests, eager data).
//
// Every rank processes the same messages in rank order, so every rank computes the same
// table of announced names, the same cache, and the same list of responses, in the same
// order, without a coordinator (negotiation.h). Small host allreduces whose data came with
// the messages are reduced at once (eager.h, Executor::reduce_eager); the other responses
// run cached ones first, consecutive host allreduces of one dtype and reduction through the
// fusion buffer together (fusion.h), each other one on its own (executor.h). What ran is
// kept in the response cache (response_cache.h); names some ranks are missing go to the
// stall inspector (stall_inspector.h).
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
#include <string_view>

#include "collectives/dtype.h"
#include "collectives/engine/cycle_message.h"
#include "collectives/engine/executor.h"
#include "collectives/engine/fusion.h"
#include "collectives/engine/pending_op.h"
#include "collectives/gpu.h"
#include "collectives/reduce_kernels.h"
#include "collectives/ring.h"
#include "collectives/timeline.h"

namespace hvdrun {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Bounded so that a message's eager section (at most 4 times it) keeps to its 32-bit length.
EngineOptions bounded(EngineOptions o) {
  o.eager_bytes = std::min<size_t>(o.eager_bytes, size_t{1} << 28);
  return o;
}
}  // namespace

Engine::Engine(Ring* ring, EngineOptions opts)
    : ring_(ring),
      opts_(bounded(std::move(opts))),
      cache_(opts_.cache_capacity),
      negotiation_(opts_.size, &cache_),
      eager_(opts_.eager_bytes, opts_.size),
      executor_(ring, opts_.rank, opts_.size) {
  if (opts_.stall_check_s > 0 && opts_.on_stall)
    stall_.emplace(opts_.stall_check_s, opts_.stall_shutdown_s, opts_.rank);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
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
      Error e = make_error(broken_kind_, broken_reason_.empty() ? "the engine is stopped" : broken_reason_);
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
    const auto head = local_.find(r.spec.name);
    if (head != local_.end() && (r.spec.kind == OpKind::kJoin || submitted_pending(r.spec.name, *head->second)))
      return refuse_duplicate(std::move(r));
    op = std::make_shared<Op>();
    op->handle = next_handle_++;
    op->req = std::move(r);
    op->submitted = now_s();
    ops_[op->handle] = op;
    if (head != local_.end()) {
      // Only refusals are pending under the name: this request pairs after them.
      behind_[op->req.spec.name].push_back(op);
      return op->handle;
    }
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
  Error e = make_error(ErrorKind::kInvalidArgument,
                       "rank " + std::to_string(opts_.rank) + ": " + op_kind_name(r.spec.kind) + " '" + r.spec.name +
                           "': a request with this name is already pending (names must be unique among pending "
                           "operations; the request each other rank pairs with this one fails too)");
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
  return make_error(ErrorKind::kInvalidArgument,
                    "unknown handle " + std::to_string(h) + " (never returned, or already waited for)");
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
    if (!recv) return make_error(ErrorKind::kInvalidArgument,
                                 "hvd_wait_result: recvbuf is null but the operation has output");
    if (op->req.spec.device) {
      auto g = opts_.gpu ? opts_.gpu() : Result<GpuCollectives*>(make_error(ErrorKind::kUnsupported, "no GPU"));
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
        result = make_error(broken_kind_, broken_reason_.empty() ? "hvd_shutdown was called" : broken_reason_);
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
      pending = !negotiation_.table().empty();  // the driver's state: read under drive_mu_
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

// The requests submitted since the last message: by their cache bit when the cache holds
// their spec, else in full (with the specs to announce again, whose cached response was
// dropped). *full_ops: whose specs go in full, as m->specs.
void Engine::collect_requests(CycleMessage* m, std::vector<Op*>* full_ops) {
  std::vector<std::shared_ptr<Op>>& fresh = fresh_scratch_;  // swapped with queue_: both keep a capacity
  fresh.clear();
  {
    std::lock_guard<std::mutex> lk(mu_);
    fresh.swap(queue_);
    if (stopping_) m->flags |= kFlagLeaving;
    for (auto& [name, op] : local_)
      if (op->state == Op::kReannounce) {
        op->state = Op::kFull;
        m->specs.push_back(op->req.spec);
        full_ops->push_back(op.get());
      }
  }
  for (auto& op : fresh) {
    const Spec& s = op->req.spec;
    if (s.kind == OpKind::kJoin) {
      join_op_ = op;
      op->state = Op::kFull;
      continue;
    }
    const ResponseCache::Slot* slot = cache_.find(s.name);
    if (slot && !s.refused && slot->spec.same_as(s)) {
      op->state = Op::kCached;
      op->cache_id = slot->id;
    } else {
      if (slot) invalidate_.push_back(s.name);
      op->state = Op::kFull;
      m->specs.push_back(s);
      full_ops->push_back(op.get());
    }
    if (opts_.timeline) opts_.timeline->phase(s.name, std::string("NEGOTIATE_") + op_kind_name(s.kind));
  }
  if (join_op_) m->flags |= kFlagJoined;
}

// What the peers know of ours after this message (requests submitted after collect_requests
// are still kQueued and do not count: see last_cycle_idle_), and the cached requests' bits.
void Engine::mark_announced(CycleMessage* m) {
  std::lock_guard<std::mutex> lk(mu_);
  announced_ = join_op_ != nullptr;
  completions_at_message_ = completions_;
  for (auto& [name, op] : local_) {
    if (op->state != Op::kQueued) announced_ = true;
    if (op->state == Op::kCached) set_bit(&m->bits, static_cast<size_t>(op->cache_id));
  }
}

void Engine::build_message(std::string* out) {
  CycleMessage m;
  m.bits.swap(bits_scratch_);  // (its capacity, from cycle to cycle)
  m.bits.clear();
  std::vector<Op*> full_ops;
  collect_requests(&m, &full_ops);
  mark_announced(&m);
  m.invalid.swap(invalidate_);
  write_message(m, full_ops, out);
  fresh_scratch_.clear();  // (the ops are held by local_ and ops_; the vector keeps its capacity)
  bits_scratch_.swap(m.bits);
}

namespace {
// A request's tensors, prescaled, one after another from `at`.
void copy_eager(const PendingOp& op, char* at) {
  const Spec& sp = op.req.spec;
  const auto dt = static_cast<hvd_dtype_t>(sp.dtype);
  for (size_t k = 0; k < sp.counts.size(); ++k) {
    scale_copy(at, op.req.tensors[k].send, sp.counts[k], dt, sp.prescale, 1);
    at += sp.counts[k] * dtype_size(dt);
  }
}
}  // namespace

// The message, framed for allgather_bytes: the header, then the eager data (8-byte aligned in
// it, prescaled): the cached requests' (EagerPlan::layout), then those announced in full, in
// their order.
void Engine::write_message(const CycleMessage& m, const std::vector<Op*>& full_ops, std::string* out) {
  const EagerLayout* layout = opts_.size > 1 ? &eager_.layout(m.bits, cache_) : nullptr;
  const size_t cached_total = layout ? layout->total : 0;
  size_t total = cached_total;
  std::vector<std::pair<size_t, Op*>> full_at;
  for (size_t i = 0; i < m.specs.size(); ++i)
    if (size_t at = eager_.place(m.specs[i], &total); at != EagerLayout::kNotEager) full_at.emplace_back(at, full_ops[i]);
  // The header is written apart and copied in front of the eager data: `out` keeps its size
  // from the last cycle, so that the eager section (the same size in steady state) is not
  // zero-filled before it is overwritten.
  std::string& head = head_scratch_;
  head.clear();
  encode_header(m, static_cast<uint32_t>(total), &head);
  const size_t base = eager_start(Ring::kFrameBytes + head.size());  // room for allgather_bytes' length first
  out->resize(base + total);
  std::memset(out->data(), 0, Ring::kFrameBytes);
  std::memcpy(out->data() + Ring::kFrameBytes, head.data(), head.size());
  std::memset(out->data() + Ring::kFrameBytes + head.size(), 0, base - Ring::kFrameBytes - head.size());
  // Every tensor's place is written below; the alignment gaps between them are never read.
  char* data = out->data() + base;
  for (auto& [at, op] : full_at) copy_eager(*op, data + at);
  if (cached_total) {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [name, op] : local_) {
      if (op->state != Op::kCached) continue;
      size_t at = layout->offset(static_cast<size_t>(op->cache_id));
      if (at != EagerLayout::kNotEager) copy_eager(*op, data + at);
    }
  }
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

std::string Engine::oldest_pending_name() {
  std::lock_guard<std::mutex> lk(mu_);
  const Op* oldest = nullptr;
  for (auto& [name, op] : local_)
    if (op->req.spec.kind != OpKind::kJoin && !op->req.spec.refused && (!oldest || op->submitted < oldest->submitted)) oldest = op.get();
  return oldest ? oldest->req.spec.name : "";
}

// A rank that leaves (hvd_shutdown) ends the job's collectives for everyone.
Status Engine::check_leaving(const std::vector<CycleMessage>& msgs) {
  for (int r = 0; r < opts_.size; ++r) {
    if (!(msgs[r].flags & kFlagLeaving)) continue;
    if (r == opts_.rank) return make_error(ErrorKind::kPeerLost, "hvd_shutdown was called with this operation pending");
    std::string who = "rank " + std::to_string(r);
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
    return make_error(ErrorKind::kPeerLost, who + " called hvd_shutdown; collectives with it are over");
  }
  return {};
}

Status Engine::process(const std::vector<std::string>& raw) {
  std::vector<CycleMessage>& msgs = cycle_parsed_;  // reused: their vectors keep their capacity
  msgs.resize(static_cast<size_t>(opts_.size));
  for (int r = 0; r < opts_.size; ++r)
    if (!decode_message(raw[r], Ring::kFrameBytes, &msgs[r]))
      return make_error(ErrorKind::kInternal, "malformed negotiation message from rank " + std::to_string(r));
  // Where each rank's eager data lies: from the cache as it was when the messages were built.
  if (auto s = eager_.locate(msgs, cache_); !s) return s;
  if (auto s = check_leaving(msgs); !s) return s;
  NegotiationResult& out = negotiated_;
  negotiation_.run(msgs, now_s(), &out);
  apply_drops(out);
  std::vector<Response> responses, ran_eagerly;  // ran_eagerly: done here; cached after the others
  take_ready(msgs, out, &responses, &ran_eagerly);
  size_t from_cache = 0;
  for (auto& r : responses) from_cache += r.from_cache ? 1 : 0;
  execute(responses);
  if (!end_cycle(from_cache)) return {};
  // Cache what ran (every rank inserts in this order, so ids agree).
  for (auto& r : ran_eagerly) responses.push_back(std::move(r));
  remember(responses);
  if (out.active == 0) end_join();
  return {};
}

// The cached names the negotiation dropped: their requests here go out again in full.
void Engine::apply_drops(const NegotiationResult& out) {
  std::lock_guard<std::mutex> lk(mu_);
  stats_.cache_invalidations += out.invalidations;
  stats_.cache_misses += out.misses;
  for (auto& name : out.dropped) reannounce(name);
}

// (mu_) A dropped cached name: its pending request here is announced again in full.
void Engine::reannounce(const std::string& name) {
  auto l = local_.find(name);
  if (l != local_.end() && l->second->state == Op::kCached) {
    l->second->state = Op::kReannounce;
    l->second->cache_id = -1;
  }
}

// The ready responses, cached first: those whose data every rank sent with its message
// run here (eager), the others go to *responses for execute().
void Engine::take_ready(const std::vector<CycleMessage>& msgs, NegotiationResult& out, std::vector<Response>* responses,
                        std::vector<Response>* ran_eagerly) {
  const bool all_active = out.active == opts_.size;
  for (size_t id : out.cached) {
    if (all_active && eager_.cached_data(id, msgs, &eager_ptrs_)) {
      const ResponseCache::Slot& slot = cache_.use(id);
      reduce_eagerly(*cache_.name_at(id), slot.spec, eager_ptrs_, /*cache_hit=*/true);
      continue;
    }
    Response resp;
    resp.name = *cache_.name_at(id);
    resp.spec = *cache_.spec_at(id);
    resp.from_cache = true;
    responses->push_back(std::move(resp));
  }
  for (auto& r : out.responses) {
    const std::vector<const char*>* data = all_active && r.status ? eager_.fresh_data(r.name) : nullptr;
    if (data) {  // every rank announced it in this cycle, with its data: done here, one exchange
      reduce_eagerly(r.name, r.spec, *data);
      ran_eagerly->push_back(std::move(r));
    } else {
      responses->push_back(std::move(r));
    }
  }
}

// After the cycle's responses ran: false when the engine broke meanwhile.
bool Engine::end_cycle(size_t from_cache) {
  last_cycle_end_ = now_s();
  std::lock_guard<std::mutex> lk(mu_);
  stats_.cache_hits += from_cache;
  // Idle means: nothing finished (negotiated or eager) although this rank had announced
  // requests. A request that arrived during the cycle (still kQueued) does not make it idle:
  // counting it would let both ranks hold new work waiting for the other's cycle for a whole
  // cycle time.
  last_cycle_idle_ = announced_ && completions_ == completions_at_message_;
  return !broken_;
}

void Engine::remember(const std::vector<Response>& ran) {
  std::string evicted;
  for (auto& r : ran) {
    if (!r.status || !cacheable(r.spec.kind)) continue;
    cache_.put(r.name, r.spec, &evicted);
    if (!evicted.empty()) {
      std::lock_guard<std::mutex> lk(mu_);
      reannounce(evicted);
    }
  }
}

// Every rank has joined: the join is done.
void Engine::end_join() {
  if (join_op_) {
    join_op_->join_last = negotiation_.last_joined();
    complete("join", {});
    join_op_.reset();
  }
  negotiation_.end_join();
}

void Engine::reduce_eagerly(const std::string& name, const Spec& sp, const std::vector<const char*>& data,
                            bool cache_hit) {
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
  executor_.reduce_eager(sp, data, *op);
  complete(name, {});
}

namespace {
// A failure that ends the engine (the ring is gone), not just the operation.
bool ends_engine(const Status& s, const Ring* ring) {
  return !s && (s.error().kind == ErrorKind::kPeerLost || s.error().kind == ErrorKind::kTimeout || ring->broken());
}
}  // namespace

void Engine::execute(std::vector<Response>& responses) {
  if (responses.empty()) return;  // (a cycle whose requests all ran eagerly)
  group_fusable(&responses);
  size_t i = 0;
  while (i < responses.size()) {
    if (!responses[i].status) {
      complete(responses[i].name, responses[i].status);
      ++i;
      continue;
    }
    const size_t end = fusion_batch_end(responses, i, opts_.fusion_bytes);
    Status s = end > i ? run_allreduce_batch(responses, i, end) : run_single(responses[i]);
    if (!s) {
      fail_all(s.error());
      return;
    }
    i = std::max(end, i + 1);
  }
}

// One response on its own: an error that ends the engine is returned, any other completes it.
Status Engine::run_single(const Response& r) {
  Status s = run_one(r);
  if (ends_engine(s, ring_)) return s;
  complete(r.name, s);
  return {};
}

// Responses [begin, end) through the fusion buffer; one tensor alone runs in place instead.
Status Engine::run_allreduce_batch(const std::vector<Response>& responses, size_t begin, size_t end) {
  size_t tensors = 0;
  for (size_t b = begin; b < end; ++b) tensors += responses[b].spec.counts.size();
  if (tensors == 1) return run_single(responses[begin]);
  std::vector<std::shared_ptr<Op>> ops;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t b = begin; b < end; ++b) {
      auto it = local_.find(responses[b].name);
      ops.push_back(it == local_.end() ? nullptr : it->second);
    }
  }
  Status st = fusion_.allreduce(ring_, opts_.size, opts_.timeline, responses, begin, end, ops,
                                [this](const std::string& name) { complete(name, {}); });
  if (!st) return st;
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.fused_batches;
  stats_.fused_tensors += tensors;
  return {};
}

// This rank's part of one response: its request (none on a joined rank), the device
// collectives it needs, then the executor.
Status Engine::run_one(const Response& r) {
  const Spec& s = r.spec;
  std::shared_ptr<Op> op;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = local_.find(r.name);
    if (it != local_.end()) op = it->second;
    if (s.kind == OpKind::kAllreduce) stats_.unfused_tensors += s.counts.size();
  }
  const char* activity = op_kind_name(s.kind);
  if (opts_.timeline) {
    std::string up = activity;
    for (auto& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    opts_.timeline->phase(s.name, (s.device ? "NCCL_" : "") + up);
  }
  GpuCollectives* gpu = nullptr;
  if (s.device) {
    if (!opts_.gpu) return make_error(ErrorKind::kUnsupported, "device memory but no GPU backend");
    auto g = opts_.gpu();
    if (!g) return g.error();
    gpu = *g;
    if (!op)
      return make_error(ErrorKind::kUnsupported,
                        std::string(activity) + " '" + s.name + "': device tensors with joined ranks are not supported");
  }
  return executor_.run(r, op.get(), gpu);
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
    broken_kind_ = e.kind;
  }
  const Error failed = wrap(e, "rank " + std::to_string(opts_.rank));
  auto fail = [&](Op& op) {
    op.status = failed;
    op.done = true;
  };
  for (auto& [name, op] : local_) fail(*op);
  for (auto& op : queue_) fail(*op);
  for (auto& [name, later] : behind_)
    for (auto& op : later) fail(*op);
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
    fail_all(make_error(ErrorKind::kPeerLost, why));
  }
  wake();
  if (thread_.joinable()) thread_.join();
}

// Rank 0 sees every rank's announcements: names some ranks announced and others not, for
// longer than HVDRUN_STALL_CHECK_TIME_SECONDS, go to hvdrun with the ranks missing.
void Engine::check_stall() {
  if (!stall_) return;
  if (auto report = stall_->check(now_s(), negotiation_, cache_))
    opts_.on_stall(format_stall(*report, opts_.host_of), report->fatal);
}

}  // namespace hvdrun
