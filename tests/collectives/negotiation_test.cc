// Negotiation as a pure function: cycle messages in, responses out.
// No ring, no threads, no clock.
#include "collectives/engine/negotiation.h"

#include <gtest/gtest.h>

#include "negotiation_test_util.h"

namespace hvdrun {
namespace {

using namespace negotiation_test;

TEST(Negotiation, ANameEveryRankAnnouncedIsOneResponse) {
  Cluster c(2);
  c.msgs[0].specs = {allreduce("a")};
  c.msgs[1].specs = {allreduce("a")};
  auto out = c.cycle();
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].name, "a");
  EXPECT_TRUE(out.responses[0].status) << out.responses[0].status.error().message;
  EXPECT_FALSE(out.responses[0].from_cache);
  EXPECT_EQ(out.misses, 1u);
  EXPECT_EQ(out.active, 2);
  EXPECT_TRUE(c.neg.table().empty());
}

TEST(Negotiation, ANameSomeRanksAnnouncedWaitsForTheOthers) {
  Cluster c(3);
  c.msgs[0].specs = {allreduce("a")};
  c.msgs[2].specs = {allreduce("a")};
  auto out = c.cycle(/*now=*/5);
  EXPECT_TRUE(out.responses.empty());
  ASSERT_EQ(c.neg.table().count("a"), 1u);
  const auto& e = c.neg.table().at("a");
  EXPECT_EQ(e.first, 5);
  EXPECT_TRUE(e.per_rank[0] && e.per_rank[2]);
  EXPECT_FALSE(e.per_rank[1]);
  c.msgs[1].specs = {allreduce("a")};
  out = c.cycle(6);
  EXPECT_EQ(c.names(out), std::vector<std::string>{"a"});
  EXPECT_EQ(out.misses, 0u);  // counted when first announced
}

TEST(Negotiation, ReadyNamesRunInTheOrderTheyWereFirstAnnounced) {
  Cluster c(2);
  c.msgs[0].specs = {allreduce("z"), allreduce("a"), allreduce("m")};
  EXPECT_TRUE(c.cycle().responses.empty());
  c.msgs[1].specs = {allreduce("m"), allreduce("a"), allreduce("z")};
  EXPECT_EQ(c.names(c.cycle()), (std::vector<std::string>{"z", "a", "m"}));
}

// Issue 29.4: Horovod compares shapes, not only counts: [17, 1311] and [17, 23, 57] hold the
// same number of elements and must still fail on every rank.
TEST(Negotiation, EqualCountsOfDifferentShapesAreAMismatchNamingTheShapes) {
  Cluster c(3);
  for (int r = 0; r < 3; ++r) c.msgs[r].specs = {allreduce("a", 17 * 1311)};
  c.msgs[0].specs[0].shapes = {2, 17, 1311};
  c.msgs[1].specs[0].shapes = {3, 17, 23, 57};
  c.msgs[2].specs[0].shapes = {2, 17, 1311};
  auto out = c.cycle();
  ASSERT_EQ(out.responses.size(), 1u);
  ASSERT_FALSE(out.responses[0].status);
  EXPECT_EQ(out.responses[0].status.error().kind, ErrorKind::kMismatch);
  EXPECT_EQ(out.responses[0].status.error().message,
            "allreduce 'a': mismatched tensor shapes: [17,1311] on ranks 0,2; [17,23,57] on rank 1");
}

// A 0-d tensor (shape []) against a [1] one, same count: a call described by no shapes holds
// one-dimensional tensors ([count]), so they differ as in Horovod.
TEST(Negotiation, AZeroDimensionalTensorIsNotAOneElementVector) {
  Cluster c(2);
  for (int r = 0; r < 2; ++r) c.msgs[r].specs = {allreduce("s", 1)};
  c.msgs[0].specs[0].shapes = {0};
  auto out = c.cycle();
  ASSERT_EQ(out.responses.size(), 1u);
  ASSERT_FALSE(out.responses[0].status);
  EXPECT_EQ(out.responses[0].status.error().message, "allreduce 's': mismatched tensor shapes: [] on rank 0; [1] on rank 1");
}

// Allgather's and alltoall's first dimensions differ from rank to rank; the others may not.
TEST(Negotiation, RowShapedKindsCompareEveryDimensionButTheFirst) {
  Cluster c(2);
  for (int r = 0; r < 2; ++r) {
    c.msgs[r].specs = {of_kind("g", OpKind::kAllgatherv), of_kind("ok", OpKind::kAllgatherv)};
    for (auto& s : c.msgs[r].specs) s.row_elems = 6;
  }
  c.msgs[0].specs[0].shapes = {3, 4, 2, 3};
  c.msgs[1].specs[0].shapes = {3, 4, 3, 2};
  c.msgs[0].specs[1].shapes = {2, 4, 6};
  c.msgs[1].specs[1].shapes = {2, 9, 6};
  c.msgs[1].specs[1].counts = {9};
  auto out = c.cycle();
  ASSERT_EQ(out.responses.size(), 2u);
  ASSERT_FALSE(out.responses[0].status);
  EXPECT_EQ(out.responses[0].status.error().message,
            "allgather 'g': mismatched tensor shapes: [2,3] on rank 0; [3,2] on rank 1");
  EXPECT_TRUE(out.responses[1].status) << out.responses[1].status.error().message;
}

// Horovod's controller refuses an allgather of a 0-d tensor on every rank, whether one rank
// or all gave one; the others' one-dimensional tensors carry no shapes.
// A 1-D tensor (its call described by no shapes) against a 2-D one: the message names both.
TEST(Negotiation, ARowShapedMismatchWithAOneDimensionalTensorNamesBothShapes) {
  Cluster c(2);
  for (int r = 0; r < 2; ++r) c.msgs[r].specs = {of_kind("g", OpKind::kAllgatherv)};
  c.msgs[0].specs[0].row_elems = 1;
  c.msgs[1].specs[0].row_elems = 3;
  c.msgs[1].specs[0].shapes = {2, 2, 3};
  c.msgs[1].specs[0].counts = {6};
  auto out = c.cycle();
  ASSERT_EQ(out.responses.size(), 1u);
  ASSERT_FALSE(out.responses[0].status);
  EXPECT_EQ(out.responses[0].status.error().message.rfind("allgather 'g': mismatched tensor shapes: [] on rank 0; [3] on rank 1", 0), 0u)
      << out.responses[0].status.error().message;
}

TEST(Negotiation, AnAllgatherOfAZeroDimensionalTensorFailsOnEveryRank) {
  Cluster c(3);
  for (int r = 0; r < 3; ++r) {
    c.msgs[r].specs = {of_kind("one", OpKind::kAllgatherv), of_kind("all", OpKind::kAllgatherv)};
    for (auto& s : c.msgs[r].specs) s.counts = {1}, s.row_elems = 1;
    c.msgs[r].specs[1].shapes = {0};
  }
  c.msgs[1].specs[0].shapes = {0};
  auto out = c.cycle();
  ASSERT_EQ(out.responses.size(), 2u);
  for (auto& resp : out.responses) {
    ASSERT_FALSE(resp.status) << resp.name;
    EXPECT_EQ(resp.status.error().kind, ErrorKind::kInvalidArgument);
  }
  EXPECT_EQ(out.responses[0].status.error().message,
            "allgather 'one': a 0-d tensor (Horovod's rank-zero tensor) on rank 1: allgather works along the first "
            "dimension, so every rank's tensor needs at least one");
  EXPECT_NE(out.responses[1].status.error().message.find("on ranks 0,1,2:"), std::string::npos)
      << out.responses[1].status.error().message;
}

TEST(Negotiation, AMismatchFailsTheNameNamingEachValuesRanks) {
  Cluster c(3);
  c.msgs[0].specs = {allreduce("a")};
  c.msgs[1].specs = {allreduce("a", 4, HVD_FLOAT64)};
  c.msgs[2].specs = {allreduce("a")};
  auto out = c.cycle();
  ASSERT_EQ(out.responses.size(), 1u);
  ASSERT_FALSE(out.responses[0].status);
  EXPECT_EQ(out.responses[0].status.error().kind, ErrorKind::kMismatch);
  EXPECT_EQ(out.responses[0].status.error().message,
            "allreduce 'a': mismatched dtype: float32 on ranks 0,2; float64 on rank 1");
}

TEST(Negotiation, ARefusedSubmissionFailsWhatTheOtherRanksPairedWithIt) {
  Cluster c(2);
  Spec refused = allreduce("a", 8);  // a refusal's other fields do not matter
  refused.refused = true;
  c.msgs[0].specs = {allreduce("a")};
  c.msgs[1].specs = {refused};
  auto out = c.cycle();
  ASSERT_EQ(out.responses.size(), 1u);
  ASSERT_FALSE(out.responses[0].status);
  EXPECT_EQ(out.responses[0].status.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_NE(out.responses[0].status.error().message.find("allreduce 'a': refused on rank 1,"), std::string::npos)
      << out.responses[0].status.error().message;
}

TEST(Negotiation, CachedBitsOfEveryRankAreReadyByIdAndTheOthersArePartial) {
  Cluster c(2);
  std::string evicted;
  c.cache.put("a", allreduce("a"), &evicted);  // id 0
  c.cache.put("b", allreduce("b"), &evicted);  // id 1
  set_bit(&c.msgs[0].bits, 0);
  set_bit(&c.msgs[0].bits, 1);
  set_bit(&c.msgs[1].bits, 1);
  auto out = c.cycle(/*now=*/7);
  EXPECT_EQ(out.cached, std::vector<size_t>{1});
  EXPECT_TRUE(out.responses.empty());
  ASSERT_EQ(c.neg.cached_partial().count("a"), 1u);
  EXPECT_EQ(c.neg.cached_partial().at("a"), (Negotiation::Partial{7, {1}}));
  set_bit(&c.msgs[0].bits, 0);
  set_bit(&c.msgs[1].bits, 0);
  out = c.cycle(8);
  EXPECT_EQ(out.cached, std::vector<size_t>{0});
  EXPECT_TRUE(c.neg.cached_partial().empty());
}

TEST(Negotiation, AnInvalidatedNameLeavesTheCacheAndItsBitsCountForNothing) {
  Cluster c(2);
  std::string evicted;
  c.cache.put("a", allreduce("a"), &evicted);
  c.msgs[0].invalid = {"a", "never-cached"};
  c.msgs[0].specs = {allreduce("a", 8)};
  set_bit(&c.msgs[1].bits, 0);
  auto out = c.cycle();
  EXPECT_TRUE(out.cached.empty());
  EXPECT_EQ(out.dropped, std::vector<std::string>{"a"});
  EXPECT_EQ(out.invalidations, 1u);
  EXPECT_FALSE(c.cache.contains("a"));
  // Rank 1 announces it again in full: the full comparison finds the mismatch.
  c.msgs[1].specs = {allreduce("a")};
  out = c.cycle();
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].status.error().kind, ErrorKind::kMismatch);
}

TEST(Negotiation, JoinedRanksAreNotWaitedForAndOnlyAllreduceAndBarrierRunWithoutThem) {
  Cluster c(3);
  c.msgs[1].flags = kFlagJoined;
  c.msgs[0].specs = {allreduce("a"), of_kind("bc", OpKind::kBroadcast)};
  c.msgs[2].specs = {allreduce("a"), of_kind("bc", OpKind::kBroadcast)};
  auto out = c.cycle();
  EXPECT_EQ(out.active, 2);
  ASSERT_EQ(c.names(out), (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(out.responses[0].status);
  ASSERT_FALSE(out.responses[1].status);
  EXPECT_EQ(out.responses[1].status.error().message,
            "broadcast 'bc' is not supported while ranks have joined (joined: 1)");
  c.msgs[0].flags = c.msgs[2].flags = kFlagJoined;
  out = c.cycle();
  EXPECT_EQ(out.active, 0);
  EXPECT_EQ(c.neg.last_joined(), 2);
  c.neg.end_join();
  EXPECT_EQ(c.cycle().active, 3);
}

TEST(Negotiation, AnAllgatherResponseCarriesEveryRanksRows) {
  Cluster c(2);
  Spec g0 = of_kind("g", OpKind::kAllgatherv), g1 = g0;
  g0.counts = {3};
  g1.counts = {5};
  c.msgs[0].specs = {g0};
  c.msgs[1].specs = {g1};
  auto out = c.cycle();
  ASSERT_EQ(out.responses.size(), 1u);
  ASSERT_TRUE(out.responses[0].status) << out.responses[0].status.error().message;
  ASSERT_EQ(out.responses[0].per_rank.size(), 2u);
  EXPECT_EQ(out.responses[0].per_rank[0].counts[0], 3u);
  EXPECT_EQ(out.responses[0].per_rank[1].counts[0], 5u);
}

}  // namespace
}  // namespace hvdrun
