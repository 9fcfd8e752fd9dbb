// The worker's runtime state behind the C API: who this rank is, the rendezvous
// connection, and the data-plane listener. One per process.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/result.h"
#include "collectives/gpu.h"
#include "collectives/ring.h"
#include "rendezvous/client.h"
#include "transport/socket_util.h"

namespace hvdrun {

struct RankView {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  std::string host = "localhost";
};

// Error with an hvd error code (HVD_ERR_*) in Error::code.
class Runtime {
 public:
  static Runtime& instance();

  Status init();
  Status shutdown();
  bool initialized() const { return initialized_; }
  const RankView& view() const { return view_; }
  Status barrier();
  Status allreduce(const void* send, void* recv, size_t count, hvd_dtype_t dtype, hvd_op_t op);
  Status broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root);
  Status allgather(const void* send, void* recv, size_t count, hvd_dtype_t dtype);

  // Reports a fatal error to hvdrun, which tears the job down with it (best effort).
  void report_fatal(const std::string& message);

  std::mutex& mutex() { return mu_; }

 private:
  std::mutex mu_;
  bool initialized_ = false;
  RankView view_;
  std::string secret_;
  std::optional<rdv::Client> client_;
  rdv::Registered ring_;
  transport::Listener listener_;
  std::unique_ptr<Ring> ring_comm_;
  std::unique_ptr<GpuCollectives> gpu_;  // made at the first device collective
  int gpu_generation_ = 0;
  Status connect_ring();
  Status ensure_gpu();
  // Whether a call's buffers are device memory (both must be on the same side).
  Result<bool> on_device(const char* what, const void* a, const void* b);
  Status check_ready(const char* what);
  Status after(Status s);
};

int spin_microseconds(int local_ranks);

// Reads the rank contract from the environment (pure over a getter, for tests).
Result<RankView> rank_view_from_env(const std::function<const char*(const char*)>& getenv_fn);

}  // namespace hvdrun
