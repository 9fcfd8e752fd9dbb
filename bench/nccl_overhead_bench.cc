// hvdrun-nccl-bench: what libhvdrun's NCCL path costs over calling NCCL directly. Run one
// rank per GPU under hvdrun:
//   hvdrun -np <GPUs> hvdrun-nccl-bench [-b 1M] [-e 1G] [-t SECONDS]
// Every rank builds a second NCCL communicator of its own (its id sent with hvd_broadcast)
// and times, for each size and collective, hvd_* on device buffers against the NCCL call
// on the same buffers followed by cudaStreamSynchronize (hvd_* returns with the result in
// the buffer, so that is the like-for-like call). Rounds alternate; the table has each
// side's median per call and the overhead in percent.
#include <cuda_runtime.h>
#include <getopt.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "size_arg.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "hvdrun-nccl-bench: rank %d: %s\n", hvd_rank(), what.c_str());
  std::exit(1);
}
void hvd_check(int rc, const char* what) {
  if (rc != HVD_SUCCESS) fail(std::string(what) + ": " + hvd_last_error());
}
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string(what) + ": " + cudaGetErrorString(e));
}
void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail(std::string(what) + ": " + ncclGetErrorString(r));
}

// Seconds per call of fn, averaged over `iters` calls.
double time_per_call(const std::function<void()>& fn, int iters) {
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) fn();
  return std::chrono::duration<double>(Clock::now() - t0).count() / iters;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t min_bytes = 1 << 20, max_bytes = size_t{1} << 30;
  double seconds_per_size = 0.5;
  for (int c; (c = getopt(argc, argv, "b:e:t:")) != -1;) {
    if (c == 'b') min_bytes = parse_size(optarg, "hvdrun-nccl-bench");
    else if (c == 'e') max_bytes = parse_size(optarg, "hvdrun-nccl-bench");
    else if (c == 't') seconds_per_size = std::atof(optarg);
    else {
      std::fprintf(stderr, "usage: hvdrun-nccl-bench [-b MIN] [-e MAX] [-t SECONDS_PER_SIZE]\n");
      return 2;
    }
  }
  hvd_check(hvd_init(), "hvd_init");
  int rank = hvd_rank(), size = hvd_size();
  cuda_check(cudaSetDevice(hvd_local_rank()), "cudaSetDevice");

  // The direct communicator: rank 0's id, broadcast over libhvdrun's CPU ring.
  ncclUniqueId id;
  if (rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  hvd_check(hvd_broadcast(&id, sizeof id, HVD_UINT8, 0), "hvd_broadcast of the NCCL id");
  ncclComm_t comm;
  nccl_check(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
  cudaStream_t stream;
  cuda_check(cudaStreamCreate(&stream), "cudaStreamCreate");

  char *send = nullptr, *recv = nullptr;
  cuda_check(cudaMalloc(&send, max_bytes), "cudaMalloc");
  cuda_check(cudaMalloc(&recv, max_bytes * size), "cudaMalloc");
  cuda_check(cudaMemset(send, 0, max_bytes), "cudaMemset");

  struct Op {
    const char* name;
    std::function<void(size_t)> hvd, direct;
  };
  std::vector<Op> ops = {
      {"allreduce",
       [&](size_t n) { hvd_check(hvd_allreduce(send, recv, n, HVD_FLOAT32, HVD_OP_SUM), "hvd_allreduce"); },
       [&](size_t n) {
         nccl_check(ncclAllReduce(send, recv, n, ncclFloat32, ncclSum, comm, stream), "ncclAllReduce");
         cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
       }},
      {"broadcast", [&](size_t n) { hvd_check(hvd_broadcast(send, n, HVD_FLOAT32, 0), "hvd_broadcast"); },
       [&](size_t n) {
         nccl_check(ncclBroadcast(send, send, n, ncclFloat32, 0, comm, stream), "ncclBroadcast");
         cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
       }},
      {"allgather", [&](size_t n) { hvd_check(hvd_allgather(send, recv, n, HVD_FLOAT32), "hvd_allgather"); },
       [&](size_t n) {
         nccl_check(ncclAllGather(send, recv, n, ncclFloat32, comm, stream), "ncclAllGather");
         cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
       }},
  };

  if (rank == 0) {
    std::printf("# hvdrun-nccl-bench: %d rank(s), float32, median us per call (hvd_* vs NCCL + stream sync)\n", size);
    std::printf("%-10s %12s %12s %12s %9s\n", "op", "bytes", "hvd_us", "nccl_us", "overhead");
  }
  int worst_ok = 1;
  for (const Op& op : ops)
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      size_t n = bytes / sizeof(float);
      for (int w = 0; w < 3; ++w) {  // warm-up, and the lazy communicator of libhvdrun
        op.hvd(n);
        op.direct(n);
      }
      // Calls per round: about seconds_per_size / 10 per side, agreed by every rank.
      auto t0 = Clock::now();
      op.direct(n);
      double one = std::chrono::duration<double>(Clock::now() - t0).count();
      hvd_check(hvd_allreduce(&one, &one, 1, HVD_FLOAT64, HVD_OP_MAX), "hvd_allreduce of the timing");
      int iters = std::clamp(static_cast<int>(seconds_per_size / 10 / std::max(one, 1e-6)), 2, 2000);
      std::vector<double> hvd_t, direct_t;
      for (int round = 0; round < 5; ++round) {
        hvd_t.push_back(time_per_call([&] { op.hvd(n); }, iters));
        direct_t.push_back(time_per_call([&] { op.direct(n); }, iters));
      }
      double h = median(hvd_t) * 1e6, d = median(direct_t) * 1e6;
      double overhead = (h - d) / d * 100;
      if (bytes >= (1 << 20) && overhead > 5) worst_ok = 0;
      if (rank == 0) std::printf("%-10s %12zu %12.1f %12.1f %8.1f%%\n", op.name, bytes, h, d, overhead);
      std::fflush(stdout);
    }
  if (rank == 0) std::printf("# target (at most 5%% overhead from 1 MiB up): %s\n", worst_ok ? "met" : "NOT met");
  cudaFree(send);
  cudaFree(recv);
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
  hvd_check(hvd_shutdown(), "hvd_shutdown");
  return 0;
}
