#include "collectives/engine/negotiation.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>

#include "collectives/dtype.h"

namespace hvdrun {
namespace {

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

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (size_t k = 0; k < v.size(); ++k) s += (k ? "," : "") + std::to_string(v[k]);
  return s;
}

std::string shapes_or_counts(const Spec& s, bool rows) {
  if (!s.shapes.empty() || rows || s.kind == OpKind::kReducescatter) return shapes_label(s, rows);
  std::string out;
  for (size_t k = 0; k < s.counts.size(); ++k) out += (k ? " [" : "[") + std::to_string(s.counts[k]) + "]";
  return out;
}

struct Field {
  const char* what;
  std::function<std::string(const Spec&)> get;
};

std::vector<Field> spec_fields(const Spec& base, bool several, bool shaped) {
  std::vector<Field> fields = {
      {"operation", [](const Spec& s) { return std::string(op_kind_name(s.kind)); }},
      {"memory", [](const Spec& s) { return std::string(s.device ? "device" : "host"); }},
      {"dtype", [several](const Spec& s) { return dtypes_label(s, several); }},
      {"reduction op", [](const Spec& s) { return std::string(op_name(static_cast<hvd_op_t>(s.op))); }},
      {"root rank", [](const Spec& s) { return std::to_string(s.root); }},
      {"prescale factor", [](const Spec& s) { return fmt_double(s.prescale); }},
      {"postscale factor", [](const Spec& s) { return fmt_double(s.postscale); }},
      {"number of tensors", [](const Spec& s) { return std::to_string(s.counts.size()); }},
      // Horovod's: the whole shape, or every dimension but the first where rows differ. A call
      // described by no shapes holds tensors of one dimension ("[count]"; a 0-d one has a shape);
      // where no rank gave shapes, the counts below say what differs.
      {"tensor shapes", [rows = per_rank_rows(base.kind), shaped](const Spec& s) {
         return shaped ? shapes_or_counts(s, rows) : std::string();
       }},
      {"elements per row", [](const Spec& s) { return std::to_string(s.row_elems); }},
  };
  if (!per_rank_rows(base.kind))
    fields.push_back({base.kind == OpKind::kReducescatter ? "rows" : "count",
                      [](const Spec& s) { return s.counts.size() == 1 ? std::to_string(s.counts[0]) : join_u64(s.counts); }});
  return fields;
}

// Each value of one field with the ranks that gave it, in order of first appearance.
std::vector<std::pair<std::string, std::vector<int>>> field_groups(const Field& f, const std::vector<const Spec*>& specs) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (size_t r = 0; r < specs.size(); ++r) {
    if (!specs[r]) continue;
    std::string v = f.get(*specs[r]);
    auto g = std::find_if(groups.begin(), groups.end(), [&](auto& x) { return x.first == v; });
    if (g == groups.end()) groups.push_back({v, {static_cast<int>(r)}});
    else g->second.push_back(static_cast<int>(r));
  }
  return groups;
}

// Horovod's controller refuses an allgather or alltoall of a 0-d tensor ("a rank-zero
// tensor") on every rank: these work along the first dimension. Empty: no rank gave one.
std::string zero_dim_error(const std::string& what, const std::vector<const Spec*>& specs) {
  std::vector<int> ranks;
  for (size_t r = 0; r < specs.size(); ++r)
    if (specs[r] && per_rank_rows(specs[r]->kind) && has_zero_dim(*specs[r])) ranks.push_back(static_cast<int>(r));
  if (ranks.empty()) return "";
  return what + ": a 0-d tensor (Horovod's rank-zero tensor) on rank" + (ranks.size() > 1 ? "s " : " ") +
         join_ints(ranks) + ": " + op_kind_name(specs[static_cast<size_t>(ranks[0])]->kind) +
         " works along the first dimension, so every rank's tensor needs at least one";
}

}  // namespace

std::string describe_mismatch(const std::string& name, const std::vector<const Spec*>& specs) {
  auto first = std::find_if(specs.begin(), specs.end(), [](const Spec* s) { return s != nullptr; });
  if (first == specs.end()) return "";
  const Spec* base = *first;
  const bool several = std::any_of(specs.begin(), specs.end(), [](const Spec* s) { return s && !s->dtypes.empty(); });
  const bool shaped = std::any_of(specs.begin(), specs.end(), [](const Spec* s) { return s && !s->shapes.empty(); });
  for (auto& f : spec_fields(*base, several, shaped)) {
    auto groups = field_groups(f, specs);
    if (groups.size() < 2) continue;
    std::string msg = std::string(op_kind_name(base->kind)) + " '" + name + "': mismatched " + f.what + ":";
    for (size_t i = 0; i < groups.size(); ++i)
      msg += (i ? ";" : "") + std::string(" ") + groups[i].first + " on rank" + (groups[i].second.size() > 1 ? "s " : " ") +
             join_ints(groups[i].second);
    return msg;
  }
  return "";
}

Negotiation::Negotiation(int size, ResponseCache* cache) : size_(size), cache_(cache), joined_(size, false) {}

void Negotiation::run(const std::vector<CycleMessage>& msgs, double now, NegotiationResult* out) {
  out->clear();
  apply_joins(msgs, out);
  // Invalidations first: their bits in this cycle mean nothing.
  apply_invalidations(msgs, out);
  if (out->active > 0) cached_ready(msgs, now, out);
  announce(msgs, now, out);
  if (out->active > 0) table_ready(out);
}

void Negotiation::apply_joins(const std::vector<CycleMessage>& msgs, NegotiationResult* out) {
  for (int r = 0; r < size_; ++r)
    if ((msgs[r].flags & kFlagJoined) && !joined_[r]) {
      joined_[r] = true;
      last_joined_ = r;
    }
  out->active = static_cast<int>(std::count(joined_.begin(), joined_.end(), false));
}

void Negotiation::apply_invalidations(const std::vector<CycleMessage>& msgs, NegotiationResult* out) {
  std::set<std::string> invalid;
  for (auto& m : msgs)
    for (auto& name : m.invalid) invalid.insert(name);
  for (auto& name : invalid)
    if (cache_->erase(name)) {
      ++out->invalidations;
      out->dropped.push_back(name);
    }
}

int Negotiation::sent_by_active(const std::vector<CycleMessage>& msgs, size_t id) const {
  int sent = 0;
  for (int r = 0; r < size_; ++r) sent += !joined_[r] && bit(msgs[r].bits, id);
  return sent;
}

// For the stall check: a name no rank sends any more is no longer partial.
void Negotiation::prune_partial(const std::vector<CycleMessage>& msgs) {
  for (auto it = cached_partial_.begin(); it != cached_partial_.end();) {
    const ResponseCache::Slot* c = cache_->find(it->first);
    if (!c || sent_by_active(msgs, static_cast<size_t>(c->id)) == 0)
      it = cached_partial_.erase(it);
    else
      ++it;
  }
}

// Cached requests ready on every active rank, by id. Only the ids some active rank sent are
// looked at (a cache holds many idle names: they cost nothing here).
void Negotiation::cached_ready(const std::vector<CycleMessage>& msgs, double now, NegotiationResult* out) {
  prune_partial(msgs);
  size_t words = 0;
  for (int r = 0; r < size_; ++r)
    if (!joined_[r]) words = std::max(words, msgs[r].bits.size());
  for (size_t w = 0; w < words; ++w) {
    uint64_t any = 0;
    for (int r = 0; r < size_; ++r)
      if (!joined_[r] && w < msgs[r].bits.size()) any |= msgs[r].bits[w];
    for (; any; any &= any - 1) cached_id(msgs, w * 64 + static_cast<size_t>(__builtin_ctzll(any)), now, out);
  }
}

void Negotiation::cached_id(const std::vector<CycleMessage>& msgs, size_t id, double now, NegotiationResult* out) {
  const std::string* name = cache_->name_at(id);
  if (!name) return;
  if (sent_by_active(msgs, id) < out->active) {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r)
      if (!joined_[r] && !bit(msgs[r].bits, id)) missing.push_back(r);
    auto [it, fresh] = cached_partial_.try_emplace(*name);
    if (fresh) it->second.first = now;
    it->second.second = std::move(missing);
    return;
  }
  if (!cached_partial_.empty()) cached_partial_.erase(*name);
  out->cached.push_back(id);
}

// Full announcements into the table.
void Negotiation::announce(const std::vector<CycleMessage>& msgs, double now, NegotiationResult* out) {
  for (int r = 0; r < size_; ++r)
    for (const Spec& s : msgs[r].specs) {
      auto [it, fresh] = table_.try_emplace(s.name);
      if (fresh) {
        it->second.seq = next_seq_++;
        it->second.first = now;
        it->second.per_rank.assign(size_, std::nullopt);
        ++out->misses;
      }
      it->second.per_rank[r] = s;
    }
}

// Table entries every active rank announced, in announcement order.
void Negotiation::table_ready(NegotiationResult* out) {
  std::vector<std::pair<uint64_t, std::string>> ready;
  for (auto& [name, e] : table_) {
    bool all = true;
    for (int r = 0; r < size_ && all; ++r)
      if (!joined_[r] && !e.per_rank[r]) all = false;
    if (all) ready.push_back({e.seq, name});
  }
  std::sort(ready.begin(), ready.end());
  for (auto& [seq, name] : ready) {
    auto node = table_.extract(name);
    out->responses.push_back(respond(name, node.mapped(), out->active));
  }
}

Response Negotiation::respond(const std::string& name, const Entry& e, int active) const {
  const int n = size_;
  Response resp;
  resp.name = name;
  std::vector<const Spec*> specs(n, nullptr);
  std::vector<int> refusers, joined;
  for (int r = 0; r < n; ++r) {
    if (e.per_rank[r]) specs[r] = &*e.per_rank[r];
    if (specs[r] && specs[r]->refused) refusers.push_back(r);
    if (joined_[r]) joined.push_back(r);
  }
  const Spec* base = *std::find_if(specs.begin(), specs.end(), [](const Spec* s) { return s != nullptr; });
  resp.spec = *base;
  const std::string what = std::string(op_kind_name(base->kind)) + " '" + name + "'";
  const std::string zero_dim = refusers.empty() ? zero_dim_error(what, specs) : "";
  std::string mismatch = refusers.empty() && zero_dim.empty() ? describe_mismatch(name, specs) : "";
  if (!refusers.empty()) {
    resp.status = make_error(ErrorKind::kInvalidArgument,
                             what + ": refused on rank" + (refusers.size() == 1 ? " " : "s ") + join_ints(refusers) +
                                 ", where it was submitted again while pending (names must be unique among pending "
                                 "operations; the k-th submission of a name pairs with the k-th on every rank)");
  } else if (!zero_dim.empty()) {
    resp.status = make_error(ErrorKind::kInvalidArgument, zero_dim);
  } else if (!mismatch.empty()) {
    resp.status = make_error(ErrorKind::kMismatch, mismatch);
  } else if (active < n && base->kind != OpKind::kAllreduce && base->kind != OpKind::kBarrier) {
    resp.status = make_error(ErrorKind::kInvalidArgument,
                             what + " is not supported while ranks have joined (joined: " + join_ints(joined) + ")");
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
  return resp;
}

}  // namespace hvdrun
