// Collectives on device memory. One of three builds is compiled in (CMake's
// HVDRUN_GPU_BACKEND): "nccl" (CUDA and NCCL found), "staging" (CUDA without NCCL: device
// buffers are copied through pinned host memory to the CPU ring), "none" (no CUDA: every
// pointer is host memory).
//
// Semantics of the device path: a call is ordered after the work already queued on the
// legacy default stream (its stream is a blocking stream), runs on a stream the runtime
// owns, and returns when the result is in the buffer. Work the caller queued on other
// streams must be complete (or synchronised) before the call.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/tunables.h"
#include "hvdrun/hvdrun.h"

namespace hvdrun {

class Ring;
namespace transport {
class Store;
}

enum class Memory { kHost, kDevice };

// "nccl", "staging" or "none".
const char* gpu_backend_name();

// Where `p` lives: cudaPointerGetAttributes in CUDA builds (device and managed memory are
// kDevice; pinned and pageable host memory kHost), always kHost in the build without CUDA.
Result<Memory> memory_of(const void* p);


struct GpuSetup {
  int rank = 0, size = 1, local_rank = 0;
  transport::Store* store = nullptr;  // the rendezvous; null only in a job of one
  Ring* ring = nullptr;           // the CPU ring, for staging
  double timeout_s = tunable_default("HVDRUN_TIMEOUT");
  int generation = 0;             // which communicator of this process (the id's key)
  std::function<void(const std::string&)> on_fatal;  // told a time-out before returning
};

class GpuCollectives {
 public:
  virtual ~GpuCollectives() = default;
  // Buffers are device memory; arguments are already checked. Errors are kCuda, kNccl, kTimeout, kUnsupported.
  virtual Status allreduce(const void* send, void* recv, size_t count, hvd_dtype_t dtype, hvd_op_t op) = 0;
  virtual Status broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root) = 0;
  virtual Status allgather(const void* send, void* recv, size_t count, hvd_dtype_t dtype) = 0;

  // The engine's kinds (collectives/engine.cc). Defaults: unsupported by this backend.
  // Allreduce with prescale/postscale applied on the device (AVERAGE divides by size too).
  virtual Status allreduce_scaled(const void* send, void* recv, size_t count, hvd_dtype_t dtype, hvd_op_t op,
                                  double prescale, double postscale) {
    if (prescale == 1 && postscale == 1) return allreduce(send, recv, count, dtype, op);
    return unsupported("allreduce with prescale/postscale on device memory");
  }
  // Blocks of bytes[r] by rank into recv (device memory), or, when recv is null, into
  // `kept` (host memory the engine keeps for hvd_wait_result).
  virtual Status allgatherv(const void*, void*, const std::vector<size_t>&, std::vector<char>*) {
    return unsupported("allgatherv on device memory");
  }
  // bytes[src * size + dst]; the blocks for rank `me`, by source, into `kept`.
  virtual Status alltoallv(const void*, const std::vector<size_t>&, int, std::vector<char>*) {
    return unsupported("alltoall on device memory");
  }
  // Reduces `count` elements across ranks; this rank's elements [first, first + mine) go to recv.
  virtual Status reducescatter(const void*, void*, size_t, size_t, size_t, hvd_dtype_t, hvd_op_t) {
    return unsupported("reducescatter on device memory");
  }
  // Host bytes to device memory (hvd_wait_result of a device operation).
  virtual Status copy_to_device(void*, const void*, size_t) { return unsupported("copies to device memory"); }
  // Thread-safe, from any thread: the communicators are aborted now (an elastic round is
  // over, round_device.h); a call in progress returns `why`, and so does every later call.
  // Default: nothing to abort (the staging and host backends run on the CPU ring, which
  // the round's end interrupts).
  virtual void abort(const Error& why) { (void)why; }

 protected:
  static Error unsupported(const std::string& what) {
    return make_error(ErrorKind::kUnsupported,
                      what + " is not supported by the " + std::string(gpu_backend_name()) + " backend");
  }
};

// Collective over all ranks: each must call it (at its first device collective, or in
// hvd_init with HVDRUN_NCCL_EAGER=1).
Result<std::unique_ptr<GpuCollectives>> make_gpu_collectives(const GpuSetup& setup);

}  // namespace hvdrun
