// The engine's cycle (see engine.cc): this rank's message out (the requests it has, by cache
// bit or in full, and eager data), every rank's messages in, the negotiation, and the
// responses run (eagerly, fused, or one by one through the executor).
#include <algorithm>
#include <cctype>
#include <cstring>

#include "collectives/dtype.h"
#include "collectives/engine/cycle_message.h"
#include "collectives/engine/engine.h"
#include "collectives/engine/executor.h"
#include "collectives/engine/fusion.h"
#include "collectives/engine/pending_op.h"
#include "collectives/gpu.h"
#include "collectives/reduce_kernels.h"
#include "collectives/ring.h"
#include "collectives/timeline.h"

namespace hvdrun {

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
    if (!op) return make_error(ErrorKind::kUnsupported,
                               std::string(activity) + " '" + s.name + "': device tensors with joined ranks are not supported");
  }
  return executor_.run(r, op.get(), gpu);
}

}  // namespace hvdrun
