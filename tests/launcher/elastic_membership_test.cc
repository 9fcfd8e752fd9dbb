// Elastic rounds: a worker is (host, slot); surviving slots keep their processes, new slots
// are spawned, ranks follow the hosts' order with new hosts in discovery's order.
#include "launcher/elastic_membership.h"

#include <gtest/gtest.h>

namespace hvdrun {
namespace {

using Slots = std::vector<ElasticSlot>;

std::string names(const Slots& s) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : " ") + x.host + ":" + std::to_string(x.index);
  return out;
}

TEST(ElasticMembership, FirstRoundIsHorovodsAssignment) {
  auto r = next_round({}, {{"a", 2}, {"b", 2}}, 0);
  EXPECT_EQ(names(r.slots), "a:0 a:1 b:0 b:1");
  EXPECT_EQ(names(r.spawned), "a:0 a:1 b:0 b:1");
  EXPECT_TRUE(r.kept.empty());
  EXPECT_TRUE(r.removed.empty());
  ASSERT_EQ(r.ranks.size(), 4u);
  EXPECT_EQ(r.ranks[3].rank, 3);
  EXPECT_EQ(r.ranks[3].size, 4);
  EXPECT_EQ(r.ranks[3].local_rank, 1);
  EXPECT_EQ(r.ranks[3].cross_rank, 1);
  EXPECT_EQ(r.ranks[3].cross_size, 2);
}

TEST(ElasticMembership, LostHostSurvivorsKeptRanksCompacted) {
  Slots cur = next_round({}, {{"a", 2}, {"b", 2}, {"c", 2}}, 0).slots;
  auto r = next_round(cur, {{"a", 2}, {"c", 2}}, 0);
  EXPECT_EQ(names(r.slots), "a:0 a:1 c:0 c:1");
  EXPECT_EQ(names(r.kept), "a:0 a:1 c:0 c:1");
  EXPECT_TRUE(r.spawned.empty());
  EXPECT_EQ(names(r.removed), "b:0 b:1");
  EXPECT_EQ(r.ranks[2].rank, 2);  // c:0 was rank 4, now 2
  EXPECT_EQ(r.ranks[2].size, 4);
  EXPECT_EQ(r.ranks[2].cross_rank, 1);
}

TEST(ElasticMembership, NewHostsAppendedInDiscoveryOrderNotTheirNames) {
  Slots cur = next_round({}, {{"m", 1}, {"b", 1}}, 0).slots;
  // Discovery lists the new hosts z then a, and puts the old ones after them: the old keep
  // their ranks, the new come after in the order of their lines.
  auto r = next_round(cur, {{"z", 1}, {"a", 1}, {"b", 1}, {"m", 1}}, 0);
  EXPECT_EQ(names(r.slots), "m:0 b:0 z:0 a:0");
  EXPECT_EQ(names(r.kept), "m:0 b:0");
  EXPECT_EQ(names(r.spawned), "z:0 a:0");
}

TEST(ElasticMembership, SlotsGrowAndShrinkOnAHost) {
  Slots cur = next_round({}, {{"a", 1}, {"b", 1}}, 0).slots;
  auto grown = next_round(cur, {{"a", 3}, {"b", 1}}, 0);
  EXPECT_EQ(names(grown.slots), "a:0 a:1 a:2 b:0");
  EXPECT_EQ(names(grown.spawned), "a:1 a:2");
  auto shrunk = next_round(grown.slots, {{"a", 1}, {"b", 1}}, 0);
  EXPECT_EQ(names(shrunk.removed), "a:1 a:2");
  EXPECT_EQ(names(shrunk.kept), "a:0 b:0");
}

TEST(ElasticMembership, MaxNpCutsTheLastHostsSlots) {
  auto r = next_round({}, {{"a", 2}, {"b", 2}, {"c", 2}}, 3);
  EXPECT_EQ(names(r.slots), "a:0 a:1 b:0");
  // A later round: b's second slot and c stay out while the job is full.
  auto again = next_round(r.slots, {{"a", 2}, {"b", 2}, {"c", 2}}, 3);
  EXPECT_EQ(names(again.kept), "a:0 a:1 b:0");
  EXPECT_TRUE(again.spawned.empty());
  // a lost: b's second slot and c's first fill in.
  auto after = next_round(r.slots, {{"b", 2}, {"c", 2}}, 3);
  EXPECT_EQ(names(after.slots), "b:0 b:1 c:0");
  EXPECT_EQ(names(after.removed), "a:0 a:1");
  EXPECT_EQ(names(after.spawned), "b:1 c:0");
}

TEST(ElasticMembership, NothingAvailableEveryoneRemoved) {
  Slots cur = next_round({}, {{"a", 2}}, 0).slots;
  auto r = next_round(cur, {}, 0);
  EXPECT_TRUE(r.slots.empty());
  EXPECT_TRUE(r.ranks.empty());
  EXPECT_EQ(names(r.removed), "a:0 a:1");
  EXPECT_TRUE(next_round({}, {{"a", 0}}, 0).slots.empty());
}

TEST(ElasticMembership, HostOrderOnlyAvailableHosts) {
  Slots cur = {{"b", 0}, {"a", 0}, {"b", 1}};
  auto order = host_order(cur, {{"a", 1}, {"c", 4}});
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], (HostSlots{"a", 1}));
  EXPECT_EQ(order[1], (HostSlots{"c", 4}));
}

}  // namespace
}  // namespace hvdrun
