// The build without CUDA: there is no device memory to find.
#include "collectives/gpu.h"
#include "collectives/gpu_version.h"

namespace hvdrun {

Result<Memory> memory_of(const void*) { return Memory::kHost; }

const char* gpu_backend_name() { return "none"; }
int gpu_nccl_version() { return 0; }

Result<std::unique_ptr<GpuCollectives>> make_gpu_collectives(const GpuSetup&) {
  return make_error(ErrorKind::kUnsupported,
                    "this libhvdrun was built without CUDA (HVDRUN_WITH_CUDA=OFF or no toolkit found)");
}

}  // namespace hvdrun
