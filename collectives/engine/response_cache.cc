#include "collectives/engine/response_cache.h"

#include <algorithm>

namespace hvdrun {

const Spec* ResponseCache::spec_at(size_t id) const {
  const std::string* name = name_at(id);
  return name ? &slots_.at(*name).spec : nullptr;
}

const ResponseCache::Slot& ResponseCache::use(size_t id) {
  Slot& slot = slots_.at(ids_[id]);
  slot.lru = ++lru_clock_;
  return slot;
}

bool ResponseCache::erase(const std::string& name) {
  auto it = slots_.find(name);
  if (it == slots_.end()) return false;
  ids_[static_cast<size_t>(it->second.id)].clear();
  slots_.erase(it);
  ++epoch_;
  return true;
}

void ResponseCache::put(const std::string& name, const Spec& spec, std::string* evicted) {
  evicted->clear();
  if (capacity_ == 0) return;
  if (auto it = slots_.find(name); it != slots_.end()) {
    it->second.lru = ++lru_clock_;
    return;
  }
  if (slots_.size() >= capacity_) {
    auto victim = std::min_element(slots_.begin(), slots_.end(),
                                   [](auto& a, auto& b) { return a.second.lru < b.second.lru; });
    *evicted = victim->first;  // a copy: erase() drops the key
    erase(*evicted);
  }
  size_t id = 0;
  while (id < ids_.size() && !ids_[id].empty()) ++id;
  if (id == ids_.size()) ids_.emplace_back();
  ids_[id] = name;
  slots_[name] = Slot{static_cast<int>(id), spec, ++lru_clock_};
  ++epoch_;
}

}  // namespace hvdrun
