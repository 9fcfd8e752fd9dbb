// The stall inspector as a pure function of the negotiation's table and the time.
#include "collectives/engine/stall_inspector.h"

#include <gtest/gtest.h>

#include "negotiation_test_util.h"

namespace hvdrun {
namespace {

using namespace negotiation_test;

TEST(StallInspector, RankZeroWarnsOnceOfNamesMissingPastTheCheckTimeAndAnyRankEndsThemPastShutdown) {
  Cluster c(3);
  std::string evicted;
  c.cache.put("cached", allreduce("cached"), &evicted);
  c.msgs[0].specs = {allreduce("late")};
  c.msgs[1].specs = {allreduce("late")};
  set_bit(&c.msgs[0].bits, 0);
  c.cycle(/*now=*/100);
  StallInspector rank0(/*check_s=*/10, /*shutdown_s=*/30, 0), rank1(10, 30, 1);
  EXPECT_FALSE(rank0.check(105, c.neg, c.cache));  // not yet past the check time
  auto report = rank0.check(111, c.neg, c.cache);
  ASSERT_TRUE(report);
  EXPECT_FALSE(report->fatal);
  EXPECT_EQ(report->missing, (std::map<int, std::vector<std::string>>{{1, {"cached"}}, {2, {"late", "cached"}}}));
  EXPECT_EQ(format_stall(*report, [](int r) { return "h" + std::to_string(r); }),
            "rank 1 (host h1) has not submitted: cached\nrank 2 (host h2) has not submitted: late cached\n");
  EXPECT_FALSE(rank0.check(120, c.neg, c.cache));  // warned once
  EXPECT_FALSE(rank1.check(120, c.neg, c.cache));  // only rank 0 warns
  report = rank1.check(131, c.neg, c.cache);
  ASSERT_TRUE(report);
  EXPECT_TRUE(report->fatal);
}

}  // namespace
}  // namespace hvdrun
