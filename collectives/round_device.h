// A round's device communicators (issue 28, docs/ELASTIC.md): made at the first device
// collective (or in hvd_init with HVDRUN_NCCL_EAGER), aborted when an elastic round ends
// (GpuCollectives::abort: a blocked NCCL collective returns the round's error instead of
// hanging the reset), and never used again after that: every later call gets the round's
// error, and the next round (after hvd_shutdown's reset) makes new ones. Thread-safe: the
// elastic watcher ends the round while the engine's thread may be in a device collective.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "collectives/gpu.h"
#include "common/result.h"

namespace hvdrun {

class RoundDevice {
 public:
  using Make = std::function<Result<std::unique_ptr<GpuCollectives>>()>;
  // The round's communicators, made by `make` (outside the lock: it may take long) the
  // first time; after end(), the round's error (nothing is made). One thread makes at a
  // time (the engine's, or hvd_init's before the engine starts).
  Result<GpuCollectives*> get(const Make& make);
  // The round is over: the communicators are aborted, now or as soon as they are made.
  void end(const Error& e);
  // hvd_shutdown: the communicators are freed; the next round starts with none.
  void reset();

 private:
  std::mutex mu_;
  std::unique_ptr<GpuCollectives> gpu_;
  std::optional<Error> ended_;
};

}  // namespace hvdrun
