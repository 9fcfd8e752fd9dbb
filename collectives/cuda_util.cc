#include "collectives/cuda_util.h"

#include <cstdlib>

#include "collectives/gpu.h"
#include "common/strings.h"
#include "common/tunables.h"

namespace hvdrun {

Error cuda_error(const std::string& what, cudaError_t e) {
  return make_error(ErrorKind::kCuda, what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

Result<Memory> memory_of(const void* p) {
  if (!p) return Memory::kHost;
  // No device, no driver: no pointer can be device memory. Asked once per process.
  static const bool have_devices = [] {
    int n = 0;
    bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    (void)cudaGetLastError();
    return ok;
  }();
  if (!have_devices) return Memory::kHost;
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not a pointer CUDA knows: plain host memory
    return Memory::kHost;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? Memory::kDevice : Memory::kHost;
}

Result<int> select_device(int rank, int local_rank) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  auto visible = tunable_if_set("CUDA_VISIBLE_DEVICES");
  std::string vis = visible ? " (CUDA_VISIBLE_DEVICES=" + *visible + ")" : "";
  if (e != cudaSuccess) return cuda_error("rank " + std::to_string(rank) + ": cudaGetDeviceCount" + vis, e);
  int device = local_rank;
  std::string chosen = tunable_string("HVDRUN_CUDA_DEVICE");
  if (!chosen.empty()) {
    auto d = parse_int(chosen, "HVDRUN_CUDA_DEVICE", 0, 1 << 16);
    if (!d) return make_error(ErrorKind::kInvalidArgument, "rank " + std::to_string(rank) + ": " + d.error().message);
    device = static_cast<int>(*d);
  }
  if (device >= count)
    return make_error(ErrorKind::kCuda,
                      "rank " + std::to_string(rank) + ": needs CUDA device " + std::to_string(device) +
                          (chosen.empty() ? " (its local rank)" : " (HVDRUN_CUDA_DEVICE)") + " but " +
                          std::to_string(count) + " device(s) are visible" + vis);
  HVDRUN_CUDA_TRY("rank " + std::to_string(rank) + ": cudaSetDevice(" + std::to_string(device) + ")",
                  cudaSetDevice(device));
  return device;
}

}  // namespace hvdrun
