// The C API (libhvdrun.so) in one process: what a call says before hvd_init, argument
// checks before anything is sent, a job of one, handles, and init again after shutdown.
// (Jobs of several ranks through the C API: tests/integration/*_launch_test.cc.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"

namespace {

std::string last_error() { return hvd_last_error(); }

// A job of one for the test's length (none of hvdrun's variables are set: size 1).
struct JobOfOne {
  JobOfOne() { EXPECT_EQ(hvd_init(), HVD_SUCCESS) << last_error(); }
  ~JobOfOne() { EXPECT_EQ(hvd_shutdown(), HVD_SUCCESS) << last_error(); }
};

TEST(CApi, BeforeInitTheQueriesAnswerMinusOneAndCollectivesSayNotInitialized) {
  ASSERT_EQ(hvd_initialized(), 0);
  EXPECT_EQ(hvd_rank(), -1);
  EXPECT_EQ(hvd_size(), -1);
  EXPECT_EQ(hvd_local_rank(), -1);
  EXPECT_EQ(hvd_cross_size(), -1);
  float x = 1;
  EXPECT_EQ(hvd_allreduce(&x, &x, 1, HVD_FLOAT32, HVD_OP_SUM), HVD_ERR_NOT_INITIALIZED);
  EXPECT_NE(last_error(), "");
  EXPECT_EQ(hvd_barrier(), HVD_ERR_NOT_INITIALIZED);
  hvd_handle_t h = 0;
  EXPECT_EQ(hvd_allreduce_async("a", &x, &x, 1, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h), HVD_ERR_NOT_INITIALIZED);
  EXPECT_EQ(h, 0) << "no handle was made";
}

TEST(CApi, AJobOfOneReducesGathersAndBroadcastsItsOwnData) {
  JobOfOne job;
  EXPECT_EQ(hvd_initialized(), 1);
  EXPECT_EQ(hvd_rank(), 0);
  EXPECT_EQ(hvd_size(), 1);
  std::vector<double> in = {1.5, -2, 4}, out(3);
  ASSERT_EQ(hvd_allreduce(in.data(), out.data(), 3, HVD_FLOAT64, HVD_OP_AVERAGE), HVD_SUCCESS) << last_error();
  EXPECT_EQ(out, in);
  std::vector<int32_t> b = {7, 8};
  ASSERT_EQ(hvd_broadcast(b.data(), 2, HVD_INT32, 0), HVD_SUCCESS) << last_error();
  EXPECT_EQ(b, (std::vector<int32_t>{7, 8}));
  std::vector<float> g(2);
  const float mine[2] = {3, 4};
  ASSERT_EQ(hvd_allgather(mine, g.data(), 2, HVD_FLOAT32), HVD_SUCCESS) << last_error();
  EXPECT_EQ(g, (std::vector<float>{3, 4}));
  EXPECT_EQ(hvd_barrier(), HVD_SUCCESS) << last_error();
}

TEST(CApi, BadArgumentsAreRefusedBeforeAnythingIsSent) {
  JobOfOne job;
  float x[4] = {1, 2, 3, 4};
  EXPECT_EQ(hvd_allreduce(x, x, 4, static_cast<hvd_dtype_t>(42), HVD_OP_SUM), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("42"), std::string::npos) << "the value is named: " << last_error();
  EXPECT_EQ(hvd_allreduce(x, x, 4, HVD_FLOAT32, static_cast<hvd_op_t>(9)), HVD_ERR_INVALID_ARGUMENT);
  int32_t i[2] = {1, 2};
  EXPECT_EQ(hvd_allreduce(i, i, 2, HVD_INT32, HVD_OP_AVERAGE), HVD_ERR_INVALID_ARGUMENT) << "average of integers";
  EXPECT_EQ(hvd_broadcast(x, 4, HVD_FLOAT32, 1), HVD_ERR_INVALID_ARGUMENT) << "root 1 of a job of one";
  EXPECT_EQ(hvd_allreduce(x, x + 1, 2, HVD_FLOAT32, HVD_OP_SUM), HVD_ERR_INVALID_ARGUMENT) << "overlapping buffers";
  EXPECT_EQ(hvd_allreduce_async("h", x, x, 4, HVD_FLOAT32, HVD_OP_SUM, 1, 1, nullptr), HVD_ERR_INVALID_ARGUMENT)
      << "a null handle pointer";
  // Nothing was sent: the job still works.
  ASSERT_EQ(hvd_allreduce(x, x, 4, HVD_FLOAT32, HVD_OP_SUM), HVD_SUCCESS) << last_error();
  EXPECT_EQ(x[3], 4);
}

TEST(CApi, HandlesArePolledWaitedOnceAndUnknownOnesSaySo) {
  JobOfOne job;
  std::vector<float> in(8, 2), out(8);
  hvd_handle_t h = 0;
  ASSERT_EQ(hvd_allreduce_async("named", in.data(), out.data(), 8, HVD_FLOAT32, HVD_OP_SUM, 3, 0.5, &h), HVD_SUCCESS)
      << last_error();
  EXPECT_GT(h, 0);
  int polled = hvd_poll(h);
  EXPECT_TRUE(polled == 0 || polled == 1) << polled;
  ASSERT_EQ(hvd_wait(h), HVD_SUCCESS) << last_error();
  EXPECT_EQ(out[7], 3.f) << "2 x prescale 3 x postscale 0.5";
  EXPECT_EQ(hvd_poll(h), -1) << "a waited handle is released";
  EXPECT_NE(hvd_wait(h), HVD_SUCCESS);
  EXPECT_EQ(hvd_poll(987654321), -1);
}

TEST(CApi, InitAgainAfterShutdownStartsAnotherJob) {
  { JobOfOne first; }
  EXPECT_EQ(hvd_initialized(), 0);
  EXPECT_EQ(hvd_rank(), -1);
  JobOfOne second;
  EXPECT_EQ(hvd_initialized(), 1);
  float x = 5;
  EXPECT_EQ(hvd_allreduce(&x, &x, 1, HVD_FLOAT32, HVD_OP_MAX), HVD_SUCCESS) << last_error();
  EXPECT_EQ(x, 5);
}

TEST(CApi, VersionAndBuildQueries) {
  EXPECT_NE(std::string(hvd_version()), "");
  EXPECT_TRUE(hvd_cuda_built() == 0 || hvd_cuda_built() == 1);
  if (!hvd_cuda_built()) {
    EXPECT_EQ(hvd_nccl_built(), 0);
  }
  // Horovod's nccl_built(): the version code (2.x.y: 2xxyy) with NCCL, 0 without.
  if (hvd_nccl_built())
    EXPECT_GE(hvd_nccl_version(), 20000);
  else
    EXPECT_EQ(hvd_nccl_version(), 0);
}

}  // namespace
