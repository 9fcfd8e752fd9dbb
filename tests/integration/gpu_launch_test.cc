// GPU collectives across real processes (ctest label `gpu`): skipped, saying why, where no
// CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "process.h"

using namespace testing_hvdrun;

namespace {

// scripts/gpu-check.sh runs these binaries elsewhere than they were built: it names them.
std::string bin(const char* env, const char* built) {
  const char* v = std::getenv(env);
  return v && *v ? v : built;
}
const std::string kHvdrun = bin("HVDRUN_TEST_HVDRUN", HVDRUN_BIN);
const std::string kGpuWorker = bin("HVDRUN_TEST_GPU_WORKER", GPU_WORKER_BIN);

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

#define REQUIRE_GPU()                                                                                  \
  int gpus = visible_gpus();                                                                           \
  if (gpus == 0) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount: " \
                              << cudaGetErrorString(cudaGetDeviceCount(&gpus)) << "): GPU test skipped"

}  // namespace

TEST(GpuLaunch, CollectivesOnDeviceMemoryOneRankPerGpu) {
  REQUIRE_GPU();
  auto o = run({kHvdrun, "-np", std::to_string(gpus), kGpuWorker, "check"}, 300);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  for (int r = 0; r < gpus; ++r)
    EXPECT_NE(o.out.find("rank " + std::to_string(r) + " gpu checked"), std::string::npos) << o.out;
}

TEST(GpuLaunch, EngineKindsOnDeviceMemory) {
  REQUIRE_GPU();
  auto o = run({kHvdrun, "-np", std::to_string(gpus), kGpuWorker, "engine"}, 300);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  for (int r = 0; r < gpus; ++r)
    EXPECT_NE(o.out.find("rank " + std::to_string(r) + " gpu engine checked"), std::string::npos) << o.out;
}

TEST(GpuLaunch, EagerInitCreatesTheCommunicatorInHvdInit) {
  REQUIRE_GPU();
  auto o = run({kHvdrun, "-np", std::to_string(gpus), kGpuWorker, "check"}, 300, {{"HVDRUN_NCCL_EAGER", "1"}});
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
}

TEST(GpuLaunch, DeviceAndHostBuffersInOneCallAreRefused) {
  REQUIRE_GPU();
  auto o = run({kHvdrun, "-np", "1", kGpuWorker, "mixed"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("sendbuf is in device memory but recvbuf in host memory"), std::string::npos) << o.out;
}

TEST(GpuLaunch, MoreRanksThanGpusIsAClearError) {
  REQUIRE_GPU();
  auto o = run({kHvdrun, "-np", std::to_string(gpus + 1), kGpuWorker, "check"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("needs CUDA device " + std::to_string(gpus) + " (its local rank) but " + std::to_string(gpus) +
                       " device(s) are visible"),
            std::string::npos)
      << o.err;
}

TEST(GpuLaunch, PeerKilledMidJobTearsItDown) {
  REQUIRE_GPU();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpus << " visible";
  auto o = run({kHvdrun, "-np", "2", "--kill-grace", "2", kGpuWorker, "die"}, 120);
  ASSERT_FALSE(o.timed_out) << "a dead peer hung the job";
  EXPECT_EQ(o.exit_code, 137) << o.err;
  EXPECT_NE(o.err.find("rank 1 (host localhost) was killed by signal 9"), std::string::npos) << o.err;
}
