#include "collectives/round_device.h"

namespace hvdrun {

Result<GpuCollectives*> RoundDevice::get(const Make& make) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (ended_) return *ended_;
    if (gpu_) return gpu_.get();
  }
  auto made = make();
  if (!made) return made.error();
  std::lock_guard<std::mutex> lk(mu_);
  gpu_ = std::move(*made);
  if (ended_) {  // the round ended while they were made: they never serve it
    gpu_->abort(*ended_);
    return *ended_;
  }
  return gpu_.get();
}

void RoundDevice::end(const Error& e) {
  std::lock_guard<std::mutex> lk(mu_);
  if (ended_) return;
  ended_ = e;
  if (gpu_) gpu_->abort(e);
}

void RoundDevice::reset() {
  std::unique_ptr<GpuCollectives> gone;
  std::lock_guard<std::mutex> lk(mu_);
  gone = std::move(gpu_);
  ended_.reset();
}

}  // namespace hvdrun
