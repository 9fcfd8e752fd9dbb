// CUDA without NCCL: device buffers go through pinned host memory to the CPU ring.
#include "common/log.h"

#include "collectives/cuda_util.h"
#include "collectives/dtype.h"
#include "collectives/gpu.h"
#include "collectives/gpu_version.h"
#include "collectives/ring.h"

namespace hvdrun {
namespace {

class PinnedBuffer {
 public:
  ~PinnedBuffer() {
    if (p_) cudaFreeHost(p_);
  }
  Result<char*> get(size_t bytes) {
    if (bytes > cap_) {
      if (p_) cudaFreeHost(p_);
      p_ = nullptr;
      cap_ = 0;
      HVDRUN_CUDA_TRY("cudaMallocHost(" + std::to_string(bytes) + ")", cudaMallocHost(&p_, bytes));
      cap_ = bytes;
    }
    return static_cast<char*>(p_);
  }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

class StagingCollectives : public GpuCollectives {
 public:
  explicit StagingCollectives(const GpuSetup& s) : ring_(s.ring), size_(s.size) {}

  Status allreduce(const void* send, void* recv, size_t count, hvd_dtype_t dtype, hvd_op_t op) override {
    size_t bytes = count * dtype_size(dtype);
    auto host = buf_.get(bytes);
    if (!host) return host.error();
    HVDRUN_CUDA_TRY("hvd_allreduce: copy to host", cudaMemcpy(*host, send, bytes, cudaMemcpyDeviceToHost));
    if (auto s = ring_->allreduce(*host, *host, count, dtype, op); !s) return s;
    HVDRUN_CUDA_TRY("hvd_allreduce: copy to device", cudaMemcpy(recv, *host, bytes, cudaMemcpyHostToDevice));
    return {};
  }

  Status broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root) override {
    size_t bytes = count * dtype_size(dtype);
    auto host = buf_.get(bytes);
    if (!host) return host.error();
    if (ring_->rank() == root)
      HVDRUN_CUDA_TRY("hvd_broadcast: copy to host", cudaMemcpy(*host, buf, bytes, cudaMemcpyDeviceToHost));
    if (auto s = ring_->broadcast(*host, count, dtype, root); !s) return s;
    if (ring_->rank() != root)
      HVDRUN_CUDA_TRY("hvd_broadcast: copy to device", cudaMemcpy(buf, *host, bytes, cudaMemcpyHostToDevice));
    return {};
  }

  Status allgather(const void* send, void* recv, size_t count, hvd_dtype_t dtype) override {
    size_t bytes = count * dtype_size(dtype);
    auto host = buf_.get(bytes * (size_ + 1));
    if (!host) return host.error();
    char* in = *host + bytes * size_;  // this rank's part, after the gathered block
    HVDRUN_CUDA_TRY("hvd_allgather: copy to host", cudaMemcpy(in, send, bytes, cudaMemcpyDeviceToHost));
    if (auto s = ring_->allgather(in, *host, count, dtype); !s) return s;
    HVDRUN_CUDA_TRY("hvd_allgather: copy to device",
                    cudaMemcpy(recv, *host, bytes * size_, cudaMemcpyHostToDevice));
    return {};
  }

 private:
  Ring* ring_;
  int size_;
  PinnedBuffer buf_;
};

}  // namespace

const char* gpu_backend_name() { return "staging"; }
int gpu_nccl_version() { return 0; }

Result<std::unique_ptr<GpuCollectives>> make_gpu_collectives(const GpuSetup& s) {
  if (s.rank == 0)
    spdlog::warn("libhvdrun was built without NCCL: device buffers are staged through host memory to the CPU ring");
  return std::unique_ptr<GpuCollectives>(new StagingCollectives(s));
}

}  // namespace hvdrun
