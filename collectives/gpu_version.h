// Which NCCL the GPU backend of this build was compiled against (defined by the backend,
// gpu_nccl.cc, gpu_staging.cc or gpu_none.cc).
#pragma once

namespace hvdrun {

// NCCL_VERSION_CODE (e.g. 21803 for 2.18.3), 0 for a backend without NCCL: what Horovod's
// nccl_built() answers.
int gpu_nccl_version();

}  // namespace hvdrun
