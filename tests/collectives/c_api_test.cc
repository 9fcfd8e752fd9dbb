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

namespace {

// Issue 29.4: a call's shapes (hvd_next_call) must hold its counts; the next call takes
// them, whatever its outcome, and the one after has none.
TEST(CApi, NextCallShapesMustHoldTheCountsAndServeOneCall) {
  JobOfOne job;
  std::vector<float> x(6, 1.f);
  const int nd[] = {2};
  const long long wrong[] = {4, 2}, right[] = {3, 2};
  ASSERT_EQ(hvd_next_call(0, 1, nd, wrong), HVD_SUCCESS) << last_error();
  EXPECT_EQ(hvd_allreduce(x.data(), x.data(), 6, HVD_FLOAT32, HVD_OP_SUM), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("does not hold its 6 elements"), std::string::npos) << last_error();
  EXPECT_EQ(hvd_allreduce(x.data(), x.data(), 6, HVD_FLOAT32, HVD_OP_SUM), HVD_SUCCESS) << "the shapes were taken";
  ASSERT_EQ(hvd_next_call(0, 1, nd, right), HVD_SUCCESS);
  hvd_handle_t h = 0;
  ASSERT_EQ(hvd_allreduce_async("shaped", x.data(), x.data(), 6, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h), HVD_SUCCESS)
      << last_error();
  EXPECT_EQ(hvd_wait(h), HVD_SUCCESS) << last_error();
  const int bad_nd[] = {-1};
  EXPECT_EQ(hvd_next_call(0, 1, bad_nd, right), HVD_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(hvd_next_call(7, 0, nullptr, nullptr), HVD_SUCCESS);
  EXPECT_EQ(hvd_allreduce_async("set7", x.data(), x.data(), 6, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h),
            HVD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("no process set 7"), std::string::npos) << last_error();
}

// Issue 29.6 in a job of one: the global set (0) only, whose ranks no other set may have.
TEST(CApi, AJobOfOneHasTheGlobalProcessSet) {
  int rank = -1, size = -1, ranks[1] = {-1}, ids[4] = {-1, -1, -1, -1}, count = 0;
  EXPECT_EQ(hvd_process_set_info(0, &rank, &size, ranks), HVD_ERR_NOT_INITIALIZED);
  JobOfOne job;
  ASSERT_EQ(hvd_process_set_info(0, &rank, &size, ranks), HVD_SUCCESS) << last_error();
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(size, 1);
  EXPECT_EQ(ranks[0], 0);
  const int zero[] = {0}, one[] = {1};
  EXPECT_EQ(hvd_init_process_sets(zero, one, 1), HVD_SUCCESS) << "a repeat of the global set is skipped";
  int id = -1;
  EXPECT_EQ(hvd_add_process_set(zero, 1, &id), HVD_ERR_INVALID_ARGUMENT) << "not dynamic";
  EXPECT_NE(last_error().find("HOROVOD_DYNAMIC_PROCESS_SETS=1"), std::string::npos) << last_error();
  EXPECT_EQ(hvd_add_process_set(one, 1, &id), HVD_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(hvd_process_set_ids(ids, 4, &count), HVD_SUCCESS);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(hvd_process_set_info(3, &rank, &size, nullptr), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hvd_remove_process_set(0), HVD_ERR_INVALID_ARGUMENT);
}

}  // namespace
