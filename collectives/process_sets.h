// Process sets (Horovod's): subsets of the job's ranks whose collectives run among
// themselves, concurrently with other sets'. Each set has its own ring over its ranks
// (subring.h) and its own engine (queue, negotiation, response cache), as Horovod gives
// each set its own controller and tensor queue. Set 0 is the whole job: the runtime's own
// ring and engine. Every rank keeps the same table, because every rank of the job adds and
// removes sets in the same order (runtime_sets.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/engine/engine.h"
#include "collectives/ring.h"
#include "common/result.h"
#include "hvdrun/hvdrun.h"

namespace hvdrun {

struct ProcessSet {
  std::vector<int> ranks;          // global ranks, ascending
  int index = -1;                  // this rank's place in `ranks`; -1: not a member
  std::unique_ptr<Ring> ring;      // members only
  std::shared_ptr<Engine> engine;  // members only
};

// Pure: a set's ranks checked (at least one, each a rank of a job of `size`, none twice)
// and sorted (a set is its ranks, in whatever order they were given).
Result<std::vector<int>> process_set_ranks(const int* ranks, int n, int size);

// The runtime's handles: an engine's handle with its set's id from bit 40 up (set 0's
// handles are its engine's own).
constexpr int kSetHandleShift = 40;
inline hvd_handle_t set_handle(int id, hvd_handle_t h) {
  return h + (static_cast<hvd_handle_t>(id) << kSetHandleShift);
}
inline int handle_set(hvd_handle_t h) { return static_cast<int>(h >> kSetHandleShift); }
inline hvd_handle_t engine_handle(hvd_handle_t h) { return h & ((hvd_handle_t{1} << kSetHandleShift) - 1); }

// "0,2,4" (for messages).
std::string ranks_text(const std::vector<int>& ranks);

}  // namespace hvdrun
