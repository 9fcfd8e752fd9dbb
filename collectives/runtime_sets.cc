// The runtime's process sets (process_sets.h) and what routes a call to its set: the next
// call's description (hvd_next_call: its set and its tensors' shapes), the submission into
// a set's engine, and the handles of a set's operations.
#include <algorithm>
#include <optional>

#include "collectives/call_shapes.h"
#include "collectives/dtype.h"
#include "collectives/rendezvous_store.h"
#include "collectives/runtime.h"
#include "collectives/subring.h"
#include "common/tunables.h"

namespace hvdrun {

namespace {
struct NextCall {
  int set = 0;
  std::vector<int64_t> shapes;
};
thread_local NextCall t_next;
// Whether t_next holds a description: a trivial thread-local, so that the calls without one
// (every C caller's) test it without t_next's initialisation guard.
thread_local bool t_described = false;

NextCall take_next_call() {
  NextCall n = std::move(t_next);
  t_next = NextCall{};
  t_described = false;
  return n;
}
}  // namespace

Status Runtime::set_next_call(int process_set, int ntensors, const int* ndims, const long long* dims) {
  clear_next_call();
  if (process_set < 0)
    return make_error(ErrorKind::kInvalidArgument, "hvd_next_call: process set " + std::to_string(process_set));
  auto shapes = encode_shapes(ntensors, ndims, dims);
  if (!shapes) return shapes.error();
  t_next.set = process_set;
  t_next.shapes = std::move(*shapes);
  t_described = true;
  return {};
}

void Runtime::clear_next_call() {
  if (t_described) (void)take_next_call();
}

std::pair<int, int> Runtime::next_call_rank_size() {
  if (t_described && t_next.set != 0) {
    std::lock_guard<std::mutex> lk(sets_mu_);
    auto it = sets_.find(t_next.set);
    if (it != sets_.end() && it->second->index >= 0)
      return {it->second->index, static_cast<int>(it->second->ranks.size())};
  }
  const RankView v = view();
  return {v.rank, v.size};
}

Result<hvd_handle_t> Runtime::submit(const char* what, Request r) {
  std::optional<NextCall> next;
  if (t_described) next = take_next_call();  // used up by this call, refused or not
  for (size_t k = 0; r.spec.device && k < std::max<size_t>(1, r.spec.dtypes.size()); ++k)
    if (auto t = r.spec.dtype_at(k); t == HVD_INT16 || t == HVD_BOOL)  // as Horovod's NCCL ops
      return make_error(ErrorKind::kUnsupported, std::string(what) + ": NCCL has no " + dtype_name(t) +
                                                     " type: move the tensor to the CPU or convert it");
  if (next) {
    if (auto s = apply_shapes(what, std::move(next->shapes), &r.spec); !s) return s.error();
    if (next->set != 0) return submit_in_set(what, next->set, std::move(r));
  }
  auto e = engine(what);
  if (!e) return e.error();
  return (*e)->submit(std::move(r));
}

Result<std::shared_ptr<ProcessSet>> Runtime::find_set(int id, const char* what) {
  if (!initialized_) return make_error(ErrorKind::kNotInitialized, std::string(what) + ": call hvd_init() first");
  std::lock_guard<std::mutex> lk(sets_mu_);
  auto it = sets_.find(id);
  if (it == sets_.end())
    return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": no process set " + std::to_string(id) +
                                                       " (never added, or removed)");
  return it->second;
}

// A set's collective: a rank outside the set may not call it; a broadcast's root is a rank
// of the job (as in Horovod), the set's engine counts ranks within the set.
Result<hvd_handle_t> Runtime::submit_in_set(const char* what, int id, Request r) {
  auto ps = find_set(id, what);
  if (!ps) return ps.error();
  const std::string set = "process set " + std::to_string(id) + " (ranks " + ranks_text((*ps)->ranks) + ")";
  if ((*ps)->index < 0)
    return make_error(ErrorKind::kInvalidArgument, std::string(what) + " '" + r.spec.name + "': rank " +
                                                       std::to_string(view().rank) + " is not in " + set);
  if (r.spec.kind == OpKind::kBroadcast) {
    auto at = std::find((*ps)->ranks.begin(), (*ps)->ranks.end(), r.spec.root);
    if (at == (*ps)->ranks.end())
      return make_error(ErrorKind::kInvalidArgument,
                        std::string(what) + " '" + r.spec.name + "': root " + std::to_string(r.spec.root) + " is not in " + set);
    r.spec.root = static_cast<int32_t>(at - (*ps)->ranks.begin());
  }
  auto h = (*ps)->engine->submit(std::move(r));
  if (!h) return h.error();
  return set_handle(id, *h);
}

Result<std::shared_ptr<Engine>> Runtime::engine_of(hvd_handle_t h, const char* what) {
  const int id = handle_set(h);
  if (id == 0) return engine(what);
  auto ps = find_set(id, what);
  if (!ps) return ps.error();
  if (!(*ps)->engine) return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": unknown handle " + std::to_string(h));
  return (*ps)->engine;
}

namespace {
Error dynamic_off(const char* what) {
  return make_error(ErrorKind::kInvalidArgument,
                    std::string(what) + ": set HOROVOD_DYNAMIC_PROCESS_SETS=1 (or HVDRUN_DYNAMIC_PROCESS_SETS=1) to add "
                                        "or remove process sets after hvd_init");
}
}  // namespace

Result<int> Runtime::add_process_set(const int* ranks, int n, bool initial) {
  const char* what = "hvd_add_process_set";
  if (!initialized_) return make_error(ErrorKind::kNotInitialized, std::string(what) + ": call hvd_init() first");
  if (!initial && tunable_string("HVDRUN_DYNAMIC_PROCESS_SETS") != "1") return dynamic_off(what);
  const RankView v = view();
  auto rs = process_set_ranks(ranks, n, v.size);
  if (!rs) return wrap(rs.error(), what);
  std::lock_guard<std::mutex> changes(set_changes_mu_);
  std::optional<int> existing;
  if (static_cast<int>(rs->size()) == v.size) existing = 0;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    for (auto& [id, ps] : sets_)
      if (ps->ranks == *rs) existing = id;
  }
  if (existing && initial) return *existing;
  if (existing)
    return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": process set " + std::to_string(*existing) +
                                                       " has these ranks (" + ranks_text(*rs) + ") already");
  auto ps = std::make_shared<ProcessSet>();
  ps->ranks = *rs;
  auto at = std::find(rs->begin(), rs->end(), v.rank);
  ps->index = at == rs->end() ? -1 : static_cast<int>(at - rs->begin());
  const int id = next_set_id_;  // the same on every rank: every rank adds every set, in one order
  if (auto s = connect_set(id, ps.get()); !s) return wrap(s.error(), what);
  std::lock_guard<std::mutex> lk(sets_mu_);
  ++next_set_id_;
  sets_[id] = std::move(ps);
  return id;
}

// Every rank of the job: its ring (members), then its engine, whose ranks are the set's.
Status Runtime::connect_set(int id, ProcessSet* ps) {
  const int n = static_cast<int>(ps->ranks.size()), i = ps->index;
  const RankView v = view();
  RingSetup rs;
  std::optional<RendezvousStore> store;
  {
    std::lock_guard<std::mutex> lk(client_mu_);
    if (client_) store.emplace(&*client_);
  }
  if (!store) return make_error(ErrorKind::kInternal, "no rendezvous to connect a process set's ring");
  rs.store = &*store;
  rs.listen_fd = listener_.fd.get();
  rs.rank = v.rank;
  rs.size = v.size;
  rs.ring = ring_options();
  rs.timeout_s = rs.ring.timeout_s;
  rs.pairs = pair_options(rs.timeout_s);
  const std::string name = "process_set/" + generation() + "." + std::to_string(id);
  auto ring = connect_subring(rs, name, i, n, i < 0 ? -1 : ps->ranks[(i + 1) % n], i < 0 ? -1 : ps->ranks[(i + n - 1) % n]);
  if (!ring) return ring.error();
  if (i < 0) return {};
  ps->ring = std::move(*ring);
  EngineOptions o = engine_options();
  o.rank = i;
  o.size = n;
  o.host_of = [this, ranks = ps->ranks](int r) { return peer_host(ranks[static_cast<size_t>(r)]); };
  o.gpu = [id]() -> Result<GpuCollectives*> {
    return make_error(ErrorKind::kUnsupported, "device tensors in process set " + std::to_string(id) +
                                                   " (process sets run host tensors only)");
  };
  ps->engine = std::make_shared<Engine>(ps->ring.get(), std::move(o));
  return {};
}

Status Runtime::remove_process_set(int id) {
  const char* what = "hvd_remove_process_set";
  if (!initialized_) return make_error(ErrorKind::kNotInitialized, std::string(what) + ": call hvd_init() first");
  if (tunable_string("HVDRUN_DYNAMIC_PROCESS_SETS") != "1") return dynamic_off(what);
  if (id == 0) return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": the global process set (0) stays");
  std::lock_guard<std::mutex> changes(set_changes_mu_);
  std::shared_ptr<ProcessSet> ps;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    auto it = sets_.find(id);
    if (it == sets_.end())
      return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": no process set " + std::to_string(id));
    ps = it->second;
    sets_.erase(it);
  }
  if (ps->engine) ps->engine->stop("process set " + std::to_string(id) + " was removed with this operation pending");
  return {};
}

void Runtime::stop_sets() {
  std::map<int, std::shared_ptr<ProcessSet>> sets;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    sets.swap(sets_);
    next_set_id_ = 1;
  }
  for (auto& [id, ps] : sets)
    if (ps->engine) ps->engine->stop("hvd_shutdown was called with this operation pending");
}

Result<Runtime::SetInfo> Runtime::process_set(int id) {
  SetInfo info;
  if (id == 0) {
    if (!initialized_) return make_error(ErrorKind::kNotInitialized, "hvd_process_set: call hvd_init() first");
    const RankView v = view();
    info.rank = v.rank;
    info.size = v.size;
    for (int r = 0; r < v.size; ++r) info.ranks.push_back(r);
    return info;
  }
  auto ps = find_set(id, "hvd_process_set");
  if (!ps) return ps.error();
  info.rank = (*ps)->index;
  info.size = static_cast<int>((*ps)->ranks.size());
  info.ranks = (*ps)->ranks;
  return info;
}

std::vector<int> Runtime::process_set_ids() {
  std::vector<int> ids{0};
  std::lock_guard<std::mutex> lk(sets_mu_);
  for (auto& [id, ps] : sets_) ids.push_back(id);
  return ids;
}

}  // namespace hvdrun
