// The response cache: the agreed spec of each name that ran, under a small id that ranks
// then send as one bit. Every rank makes the same insertions and evictions (LRU) in the
// same order, so the ids agree without a coordinator (Horovod's response_cache).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/engine/spec.h"

namespace hvdrun {

class ResponseCache {
 public:
  struct Slot {
    int id = -1;
    Spec spec;
    uint64_t lru = 0;
  };

  explicit ResponseCache(size_t capacity) : capacity_(capacity) {}

  const Slot* find(const std::string& name) const {
    auto it = slots_.find(name);
    return it == slots_.end() ? nullptr : &it->second;
  }
  bool contains(const std::string& name) const { return slots_.count(name) != 0; }
  // The name cached under `id`; null when the id is free.
  const std::string* name_at(size_t id) const {
    return id < ids_.size() && !ids_[id].empty() ? &ids_[id] : nullptr;
  }
  // The spec cached under `id`; null when the id is free.
  const Spec* spec_at(size_t id) const;
  // Marks the name under `id` (which is not free) as just used; its slot.
  const Slot& use(size_t id);
  // Drops `name`; false when it was not cached.
  bool erase(const std::string& name);
  // Keeps a name that ran: a cached one is marked used; a new one takes the lowest free id,
  // the least recently used name making room first when the cache is full (*evicted names
  // it, "" when none). Does nothing with capacity 0.
  void put(const std::string& name, const Spec& spec, std::string* evicted);
  // Bumped by every change of the ids (the eager layouts depend on them).
  uint64_t epoch() const { return epoch_; }
  size_t size() const { return slots_.size(); }

 private:
  size_t capacity_;
  std::unordered_map<std::string, Slot> slots_;  // by name
  std::vector<std::string> ids_;                 // id -> name ("" free)
  uint64_t lru_clock_ = 0;
  uint64_t epoch_ = 0;
};

}  // namespace hvdrun
