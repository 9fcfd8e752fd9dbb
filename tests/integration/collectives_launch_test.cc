// Collectives across real processes started by hvdrun.
#include <gtest/gtest.h>

#include "process.h"

using namespace testing_hvdrun;

namespace {
const std::string kHvdrun = HVDRUN_BIN;
const std::string kColl = COLL_WORKER_BIN;
}  // namespace

class CollectivesLaunch : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesLaunch, ResultsAreRightOnEveryRank) {
  int n = GetParam();
  auto o = run({kHvdrun, "-np", std::to_string(n), kColl, "check"}, 240);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  for (int r = 0; r < n; ++r)
    EXPECT_NE(o.out.find("[" + std::to_string(r) + "]<stdout>:rank " + std::to_string(r) + " checked"),
              std::string::npos);
}
INSTANTIATE_TEST_SUITE_P(Sizes, CollectivesLaunch, ::testing::Values(1, 2, 3, 4, 7));

TEST(CollectivesLaunchFailures, PeerKilledMidAllreduceFailsTheJobFast) {
  auto o = run({kHvdrun, "-np", "3", "--kill-grace", "2", kColl, "die"}, 120);
  ASSERT_FALSE(o.timed_out) << "a dead peer hung the job";
  EXPECT_EQ(o.exit_code, 137) << o.err;
  EXPECT_NE(o.err.find("hvdrun: rank 1 (host localhost) was killed by signal 9 (SIGKILL)"), std::string::npos)
      << o.err;
}

TEST(CollectivesLaunchFailures, MismatchedCountsAreAClearError) {
  auto o = run({kHvdrun, "-np", "2", kColl, "mismatch"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("called allreduce(count=10, float32, sum)"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("called allreduce(count=11, float32, sum)"), std::string::npos) << o.err;
}
