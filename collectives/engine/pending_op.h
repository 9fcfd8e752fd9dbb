// A request as the engine holds it from submit to completion (shared by the engine and the
// executor, which writes its outputs).
#pragma once

#include <atomic>
#include <vector>

#include "collectives/engine/spec.h"
#include "common/result.h"
#include "hvdrun/hvdrun.h"

namespace hvdrun {

struct PendingOp {
  PendingOp() { live_ops().fetch_add(1, std::memory_order_relaxed); }
  ~PendingOp() { live_ops().fetch_sub(1, std::memory_order_relaxed); }
  PendingOp(const PendingOp&) = delete;
  PendingOp& operator=(const PendingOp&) = delete;
  // Operations alive in this process (every engine's): hvd_shutdown leaves none (tests).
  static std::atomic<long>& live_ops() {
    static std::atomic<long> n{0};
    return n;
  }
  hvd_handle_t handle = 0;
  Request req;
  std::atomic<bool> done{false};  // set under Engine::mu_ after status; read without it too
  Status status;
  // Queued: not yet in a message; full: announced by its spec; cached: by its cache bit;
  // reannounce: its cached response was dropped, its spec goes out in the next message.
  enum State { kQueued, kFull, kCached, kReannounce } state = kQueued;
  int cache_id = -1;
  std::vector<size_t> rows_per_rank;
  std::vector<char> output;  // kept output (allgatherv, alltoall without a recv buffer)
  int join_last = -1;
  double submitted = 0;
  bool caller_waits = false;  // submitted under Engine::CallerWaits (a blocking call)
  bool held_done = false;     // (Engine::mu_) done, its handle not yet waited: counted in held_done_
};

}  // namespace hvdrun
