// The C API's error table (hvd_code_of, collectives/c_api.cc): every error kind has a code
// of hvdrun.h, the worker side's kinds their own; and errors reach a caller as that code
// with their message. Built with c_api.cc itself (libhvdrun.so hides hvd_code_of; the
// library's own tests: c_api_test.cc). No job: nothing here calls hvd_init.
#include "collectives/c_api.h"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <set>
#include <string>

#include "hvdrun/hvdrun.h"

namespace hvdrun {
namespace {

TEST(CApiCodes, EveryKindHasACodeOfTheHeader) {
  for (int k = static_cast<int>(kFirstErrorKind); k <= static_cast<int>(kLastErrorKind); ++k) {
    int code = hvd_code_of(static_cast<ErrorKind>(k));
    EXPECT_GE(code, HVD_ERR_NOT_INITIALIZED) << "kind " << k;
    EXPECT_LE(code, HVD_ERR_REMOVED) << "kind " << k;
  }
}

TEST(CApiCodes, TheWorkerSidesKindsHaveTheirOwnCodes) {
  EXPECT_EQ(hvd_code_of(ErrorKind::kNotInitialized), HVD_ERR_NOT_INITIALIZED);
  EXPECT_EQ(hvd_code_of(ErrorKind::kInvalidArgument), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hvd_code_of(ErrorKind::kRendezvous), HVD_ERR_RENDEZVOUS);
  EXPECT_EQ(hvd_code_of(ErrorKind::kAuth), HVD_ERR_AUTH);
  EXPECT_EQ(hvd_code_of(ErrorKind::kTimeout), HVD_ERR_TIMEOUT);
  EXPECT_EQ(hvd_code_of(ErrorKind::kPeerLost), HVD_ERR_PEER);
  EXPECT_EQ(hvd_code_of(ErrorKind::kMismatch), HVD_ERR_MISMATCH);
  EXPECT_EQ(hvd_code_of(ErrorKind::kUnsupported), HVD_ERR_UNSUPPORTED);
  EXPECT_EQ(hvd_code_of(ErrorKind::kInternal), HVD_ERR_INTERNAL);
  EXPECT_EQ(hvd_code_of(ErrorKind::kCuda), HVD_ERR_CUDA);
  EXPECT_EQ(hvd_code_of(ErrorKind::kNccl), HVD_ERR_NCCL);
  EXPECT_EQ(hvd_code_of(ErrorKind::kReset), HVD_ERR_RESET);
  EXPECT_EQ(hvd_code_of(ErrorKind::kRemoved), HVD_ERR_REMOVED);
  // Each HVD_ERR_* code is some kind's: none is unreachable.
  std::set<int> codes;
  for (int k = static_cast<int>(kFirstErrorKind); k <= static_cast<int>(kLastErrorKind); ++k)
    codes.insert(hvd_code_of(static_cast<ErrorKind>(k)));
  EXPECT_EQ(codes.size(), static_cast<size_t>(HVD_ERR_REMOVED));
}

TEST(CApiCodes, LowerLayersKindsAreInternalAtTheBoundary) {
  // errno-born and launcher kinds that leak to a caller are a broken invariant, not a
  // code that means something else (an errno used to come out as its number).
  for (ErrorKind k : {ErrorKind::kSystem, ErrorKind::kMalformed, ErrorKind::kMissingKey, ErrorKind::kLaunchFailed,
                      ErrorKind::kRankFailed})
    EXPECT_EQ(hvd_code_of(k), HVD_ERR_INTERNAL) << static_cast<int>(k);
}

TEST(CApi, ACallBeforeInitIsNotInitializedWithItsMessage) {
  float x = 1;
  ASSERT_EQ(hvd_initialized(), 0);
  EXPECT_EQ(hvd_allreduce(&x, &x, 1, HVD_FLOAT32, HVD_OP_SUM), HVD_ERR_NOT_INITIALIZED);
  EXPECT_EQ(std::string(hvd_last_error()), "hvd_allreduce: call hvd_init() first");
}

// Elastic (the contract with hvdrun.torch.elastic): outside an elastic job no change is told.
TEST(CApi, ElasticQueriesOutsideAnElasticJob) {
  unsetenv("HVDRUN_ELASTIC");
  EXPECT_EQ(hvd_elastic(), 0);
  setenv("HVDRUN_ELASTIC", "1", 1);
  EXPECT_EQ(hvd_elastic(), 1);
  unsetenv("HVDRUN_ELASTIC");
  long long seq = 5;
  int kinds = 7;
  EXPECT_EQ(hvd_elastic_updates(&seq, &kinds), HVD_SUCCESS);
  EXPECT_EQ(seq, 0);
  EXPECT_EQ(kinds, 0);
  EXPECT_EQ(hvd_elastic_updates(nullptr, &kinds), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(hvd_last_error()), "hvd_elastic_updates: seq or kinds is null");
}

}  // namespace
}  // namespace hvdrun
