#include "launcher/rank_assignment.h"

#include <gtest/gtest.h>

namespace hvdrun {

// (rank, size, local_rank, local_size, cross_rank, cross_size, host)
using T = std::tuple<int, int, int, int, int, int, std::string>;

std::vector<T> tuples(const std::vector<RankInfo>& rs) {
  std::vector<T> out;
  for (const auto& r : rs) out.emplace_back(r.rank, r.size, r.local_rank, r.local_size, r.cross_rank, r.cross_size, r.host);
  return out;
}

TEST(RankAssignment, HorovodDocExample) {
  // ANCHORS.md: -H worker-0:2,worker-1:2 -np 4.
  auto r = assign_ranks({{"worker-0", 2}, {"worker-1", 2}}, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(tuples(*r), (std::vector<T>{{0, 4, 0, 2, 0, 2, "worker-0"},
                                        {1, 4, 1, 2, 0, 2, "worker-0"},
                                        {2, 4, 0, 2, 1, 2, "worker-1"},
                                        {3, 4, 1, 2, 1, 2, "worker-1"}}));
}

TEST(RankAssignment, UnevenHostsCrossRankCountsOnlyHostsWithThatLocalRank) {
  // Horovod's test_get_host_assignments style: host slots 2, 1, 3.
  auto r = assign_ranks({{"a", 2}, {"b", 1}, {"c", 3}}, 6);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(tuples(*r), (std::vector<T>{{0, 6, 0, 2, 0, 3, "a"},
                                        {1, 6, 1, 2, 0, 2, "a"},
                                        {2, 6, 0, 1, 1, 3, "b"},
                                        {3, 6, 0, 3, 2, 3, "c"},
                                        {4, 6, 1, 3, 1, 2, "c"},
                                        {5, 6, 2, 3, 0, 1, "c"}}));
}

TEST(RankAssignment, FewerRanksThanSlotsTakesTheFirstSlots) {
  auto r = assign_ranks({{"a", 4}, {"b", 4}}, 5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(tuples(*r), (std::vector<T>{{0, 5, 0, 4, 0, 2, "a"},
                                        {1, 5, 1, 4, 0, 1, "a"},
                                        {2, 5, 2, 4, 0, 1, "a"},
                                        {3, 5, 3, 4, 0, 1, "a"},
                                        {4, 5, 0, 1, 1, 2, "b"}}));
  // Hosts past np get nothing.
  r = assign_ranks({{"a", 2}, {"b", 2}, {"c", 2}}, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].cross_size, 1);
}

TEST(RankAssignment, NpZeroMeansAllSlots) {
  auto r = assign_ranks({{"a", 3}, {"b", 1}}, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 4u);
  EXPECT_EQ(r->back().host_index, 1);
}

TEST(RankAssignment, MoreThanSlotsNamesBothNumbers) {
  auto r = assign_ranks({{"a", 2}, {"b", 2}}, 5);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "requested more processes (5) than there are available slots (4)");
}

TEST(RankAssignment, LargeJobIsConsistent) {
  auto r = assign_ranks({{"a", 8}, {"b", 8}, {"c", 8}, {"d", 8}}, 32);
  ASSERT_TRUE(r.ok());
  for (const auto& x : *r) {
    EXPECT_EQ(x.rank, x.host_index * 8 + x.local_rank);
    EXPECT_EQ(x.cross_rank, x.host_index);
    EXPECT_EQ(x.cross_size, 4);
  }
}

}  // namespace hvdrun
