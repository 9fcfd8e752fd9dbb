#include "collectives/engine/eager.h"

#include <algorithm>

#include "collectives/dtype.h"

namespace hvdrun {

size_t EagerLayout::offset(size_t id) const {
  auto it = std::lower_bound(at.begin(), at.end(), std::make_pair(id, size_t{0}));
  return it != at.end() && it->first == id ? it->second : kNotEager;
}

size_t EagerPlan::place(const Spec& sp, size_t* end) const {
  if (sp.kind != OpKind::kAllreduce || sp.device || sp.refused || !sp.dtypes.empty() || size_ < 2 || limit_ == 0)
    return EagerLayout::kNotEager;
  // Every rank receives the others' copies: (n - 1) times the bytes, against the ring
  // allreduce's 2 (n - 1) / n (in more steps). The limits bound what each rank receives.
  const size_t others = static_cast<size_t>(size_ - 1);
  const size_t es = dtype_size(static_cast<hvd_dtype_t>(sp.dtype));
  size_t bytes = 0;
  for (auto c : sp.counts) {
    if (c > limit_) return EagerLayout::kNotEager;
    bytes += c * es;
  }
  size_t at = (*end + 7) & ~size_t{7};  // each tensor's data 8-byte aligned for the reduction
  if (bytes == 0 || bytes * others > limit_ || (at + bytes) * others > 4 * limit_) return EagerLayout::kNotEager;
  *end = at + bytes;
  return at;
}

void EagerPlan::compute(const std::vector<uint64_t>& bits, const ResponseCache& cache, EagerLayout* out) const {
  out->bits = bits;
  out->cache_epoch = cache.epoch();
  out->at.clear();
  size_t total = 0;
  for (size_t w = 0; w < bits.size(); ++w)
    for (uint64_t word = bits[w]; word; word &= word - 1) {
      const size_t id = w * 64 + static_cast<size_t>(__builtin_ctzll(word));
      const Spec* spec = cache.spec_at(id);
      if (!spec) continue;
      size_t at = place(*spec, &total);
      if (at != EagerLayout::kNotEager) out->at.emplace_back(id, at);
    }
  out->total = total;
}

const EagerLayout& EagerPlan::layout(const std::vector<uint64_t>& bits, const ResponseCache& cache) {
  if (!memo_.holds(bits, cache.epoch())) compute(bits, cache, &memo_);
  return memo_;
}

Status EagerPlan::locate(const std::vector<CycleMessage>& msgs, const ResponseCache& cache) {
  const int n = size_;
  // In steady state every rank sends the same bits: one (kept) layout for all.
  at_.assign(static_cast<size_t>(n), nullptr);
  others_.clear();  // at_ points into it: reserved before use
  for (int r = 0; r < n; ++r) {
    if (msgs[r].eager.empty()) continue;
    for (int q = 0; q < r && !at_[r]; ++q)
      if (at_[q] && msgs[q].bits == msgs[r].bits) at_[r] = at_[q];
    if (at_[r]) continue;
    if (memo_.holds(msgs[r].bits, cache.epoch())) {
      at_[r] = &memo_;
    } else {
      if (others_.empty()) others_.reserve(static_cast<size_t>(n));
      compute(msgs[r].bits, cache, &others_.emplace_back());
      at_[r] = &others_.back();
    }
  }
  // The data of requests announced in full, after the cached ones (as build_message put it).
  fresh_.clear();
  for (int r = 0; r < n; ++r) {
    if (!at_[r]) continue;
    size_t end = at_[r]->total;
    for (auto& sp : msgs[r].specs) {
      size_t at = place(sp, &end);
      if (at == EagerLayout::kNotEager) continue;
      auto& d = fresh_[sp.name];
      d.resize(n, nullptr);
      d[r] = msgs[r].eager.data() + at;
    }
    if (end != msgs[r].eager.size())
      return make_error(ErrorKind::kInternal, "negotiation message from rank " + std::to_string(r) + " holds " +
                       std::to_string(msgs[r].eager.size()) + " bytes of eager data, not " + std::to_string(end));
  }
  return {};
}

bool EagerPlan::cached_data(size_t id, const std::vector<CycleMessage>& msgs, std::vector<const char*>* data) const {
  const int n = size_;
  for (int r = 0; r < n; ++r)
    if (!at_[r] || at_[r]->offset(id) == EagerLayout::kNotEager) return false;
  data->resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) (*data)[r] = msgs[r].eager.data() + at_[r]->offset(id);
  return true;
}

const std::vector<const char*>* EagerPlan::fresh_data(const std::string& name) const {
  auto f = fresh_.find(name);
  if (f == fresh_.end() || std::find(f->second.begin(), f->second.end(), nullptr) != f->second.end()) return nullptr;
  return &f->second;
}

}  // namespace hvdrun
