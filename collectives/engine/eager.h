// Eager reductions: small host allreduces travel with the negotiation itself. A rank
// appends the data (prescaled) of each pending cached host allreduce, in cache-id order, and
// of each host allreduce it announces in full, in announcement order, while what every other
// rank receives stays within EngineOptions::eager_bytes per tensor and 4 times that in all
// ((n - 1) times the data: beyond that the ring allreduce moves fewer bytes). When every
// rank has sent a name's bit and its data (or its spec and data, in the same cycle), every
// rank reduces the contributions in rank order and is done: one exchange instead of
// negotiation plus transfer, and bitwise the same result everywhere.
//
// This file says where the data lies; the engine copies it in (build_message) and reduces
// it (Executor::reduce_eager).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collectives/engine/cycle_message.h"
#include "collectives/engine/response_cache.h"
#include "common/result.h"

namespace hvdrun {

// Where the eager data lies in a message whose bit vector is `bits`: (cache id, offset of
// the tensor's data) by id for the tensors that travel eagerly, and the total.
struct EagerLayout {
  static constexpr size_t kNotEager = SIZE_MAX;
  std::vector<uint64_t> bits;
  std::vector<std::pair<size_t, size_t>> at;
  size_t total = 0;
  uint64_t cache_epoch = 0;
  size_t offset(size_t id) const;  // kNotEager when the tensor does not travel eagerly
  // Whether it is the layout of `b` with the cache as it is (at `epoch`).
  bool holds(const std::vector<uint64_t>& b, uint64_t epoch) const { return cache_epoch == epoch && bits == b; }
};

class EagerPlan {
 public:
  // `limit`: EngineOptions::eager_bytes (0: never); `size`: the ranks.
  EagerPlan(size_t limit, int size) : limit_(limit), size_(size) {}
  // Places a host allreduce's data in an eager section whose used part ends at *end: its
  // offset (8-byte aligned; *end moves past it), or kNotEager when it is no host allreduce,
  // has no data, or would pass the eager bounds (*end unchanged).
  size_t place(const Spec& sp, size_t* end) const;
  // The layout for `bits` under the cache as it is now: steady state sends the same bits
  // every cycle, so the last one computed is kept (and recomputed once the cache changes).
  const EagerLayout& layout(const std::vector<uint64_t>& bits, const ResponseCache& cache);
  // Finds where each rank's eager data lies in one cycle's messages (from the cache as it
  // was when they were built). An error when a rank's section is not the size its bits and
  // specs make it.
  Status locate(const std::vector<CycleMessage>& msgs, const ResponseCache& cache);
  // Every rank's data of cached id `id` in the located messages; false unless every rank sent it.
  bool cached_data(size_t id, const std::vector<CycleMessage>& msgs, std::vector<const char*>* data) const;
  // Every rank's data of a name announced in full in the located messages; null unless
  // every rank sent it.
  const std::vector<const char*>* fresh_data(const std::string& name) const;

 private:
  void compute(const std::vector<uint64_t>& bits, const ResponseCache& cache, EagerLayout* out) const;

  size_t limit_;
  int size_;
  EagerLayout memo_;
  // Valid from locate() to the next: each rank's layout, into memo_ or others_.
  std::vector<const EagerLayout*> at_;
  std::vector<EagerLayout> others_;
  // The data of requests announced in full, by name: each rank's (null where it sent none).
  std::unordered_map<std::string, std::vector<const char*>> fresh_;
};

}  // namespace hvdrun
