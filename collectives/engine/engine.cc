// The collective engine: the queue, the waits and the threads (here), and the cycle that ties
// the parts in this folder together (engine_cycle.cc).
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
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string_view>

#include "collectives/engine/pending_op.h"
#include "collectives/gpu.h"
#include "collectives/ring.h"
#include "collectives/timeline.h"

namespace hvdrun {

double Engine::now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

// Bounded so that a message's eager section (at most 4 times it) keeps to its 32-bit length.
EngineOptions bounded(EngineOptions o) {
  o.eager_bytes = std::min<size_t>(o.eager_bytes, size_t{1} << 28);
  return o;
}
}  // namespace

int thread_cpu_of(std::string_view list, int local_rank, int local_size) {
  std::vector<int> ids;
  size_t start = 0;
  while (start <= list.size() && !list.empty()) {
    size_t comma = std::min(list.find(',', start), list.size());
    std::string_view id = list.substr(start, comma - start);
    int v = 0;
    if (id.empty() || id.size() > 5 || id.find_first_not_of("0123456789") != std::string_view::npos) return -1;
    for (char c : id) v = v * 10 + (c - '0');
    ids.push_back(v);
    start = comma + 1;
  }
  if (ids.size() == 1) return ids[0];
  if (local_rank < 0 || local_rank >= static_cast<int>(ids.size()) || static_cast<int>(ids.size()) < local_size) return -1;
  return ids[static_cast<size_t>(local_rank)];
}

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
    if (name_taken(r, head != local_.end() ? head->second.get() : nullptr)) return refuse_duplicate(std::move(r));
    op = std::make_shared<Op>();
    op->handle = next_handle_++;
    op->caller_waits = t_caller_waits;
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

bool Engine::name_taken(const Request& r, const Op* head) const {
  if (head && (r.spec.kind == OpKind::kJoin || submitted_pending(r.spec.name, *head))) return true;
  return !held_done_.empty() && held_done_.count(r.spec.name);  // finished, its handle not yet waited for
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
  if (!local_.count(op->req.spec.name)) {  // the name's earlier operation has finished (held_done_)
    local_[op->req.spec.name] = op;
    queue_.push_back(std::move(op));
    wake(/*unpark=*/false);  // announced in the next cycle, as a submission (takes no lock of ours)
    return e;
  }
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
  auto it = ops_.find(h);
  if (it == ops_.end()) return;
  if (it->second->held_done) {
    auto held = held_done_.find(it->second->req.spec.name);
    if (--held->second == 0) held_done_.erase(held);
  }
  ops_.erase(it);
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
  if (opts_.thread_cpu >= 0 && opts_.thread_cpu < CPU_SETSIZE) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(opts_.thread_cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // a CPU not ours: EINVAL, left as it is
  }
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
    if (broken_ && round_over_) fail_all(Error{});  // (end_round found a cycle running; its error wins)
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
  if (op->handle && !op->caller_waits) {  // (a refusal has no handle)
    op->held_done = true;
    ++held_done_[name];
  }
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
  const Error failed = wrap(round_over_ ? round_error_ : e, "rank " + std::to_string(opts_.rank));
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

void Engine::end_round(const Error& e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    round_error_ = e;
    round_over_ = true;
    if (!broken_) {
      broken_reason_ = e.message;
      broken_kind_ = e.kind;
      broken_ = true;
    }
  }
  {
    // No cycle runs: no transfer uses an operation's buffers, which may fail now. Otherwise
    // the thread in the cycle fails them when its transfer breaks (or at drive()'s next turn).
    std::unique_lock<std::mutex> d(drive_mu_, std::try_to_lock);
    if (d.owns_lock()) fail_all(e);
  }
  wake();
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
