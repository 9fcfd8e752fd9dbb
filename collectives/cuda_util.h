// CUDA helpers shared by the staging and NCCL backends (CUDA builds only).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/result.h"
#include "hvdrun/hvdrun.h"

namespace hvdrun {

// "what: cudaErrorX: text" as a kCuda error.
Error cuda_error(const std::string& what, cudaError_t e);

#define HVDRUN_CUDA_TRY(what, call)                                 \
  do {                                                              \
    cudaError_t hvdrun_e_ = (call);                                 \
    if (hvdrun_e_ != cudaSuccess) return ::hvdrun::cuda_error(what, hvdrun_e_); \
  } while (0)

// Picks and sets this rank's device: HVDRUN_CUDA_DEVICE, else the local rank, within
// CUDA_VISIBLE_DEVICES. Errors say how many devices are visible.
Result<int> select_device(int rank, int local_rank);

}  // namespace hvdrun
