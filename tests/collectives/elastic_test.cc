// The elastic store's keys and values as the worker reads them (collectives/elastic.cc;
// docs/ELASTIC.md). The watcher itself: runtime_elastic_test.cc.
#include "collectives/elastic.h"

#include <gtest/gtest.h>

namespace hvdrun {
namespace {

TEST(Elastic, KeysOfRoundsSlotsAndUpdates) {
  EXPECT_EQ(elastic_slot_key(3, "node2:1"), "hvdrun/elastic/round/3/slot/node2:1");
  EXPECT_EQ(elastic_update_key(12), "hvdrun/elastic/update/12");
  EXPECT_STREQ(kElasticRoundKey, "hvdrun/elastic/round");
}

TEST(Elastic, ASlotsValueIsItsSixNumbersOrRemoved) {
  auto s = parse_slot_numbers("5 8 1 2 2 4");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_FALSE(s->removed);
  EXPECT_EQ(s->rank, 5);
  EXPECT_EQ(s->size, 8);
  EXPECT_EQ(s->local_rank, 1);
  EXPECT_EQ(s->local_size, 2);
  EXPECT_EQ(s->cross_rank, 2);
  EXPECT_EQ(s->cross_size, 4);
  auto r = parse_slot_numbers("removed");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->removed);
  for (const char* bad : {"", "1 2 3", "1 2 0 1 0 1 7", "x 2 0 1 0 1", "2 2 0 1 0 1", "0 1 1 1 0 1", "-1 2 0 1 0 1"}) {
    auto b = parse_slot_numbers(bad);
    ASSERT_FALSE(b.ok()) << "'" << bad << "'";
    EXPECT_EQ(b.error().kind, ErrorKind::kMalformed) << "'" << bad << "'";
  }
}

TEST(Elastic, AnUpdatesValueIsItsKindsAndTheRoundItEnds) {
  auto u = parse_elastic_update("2 4");
  ASSERT_TRUE(u.ok()) << u.error().message;
  EXPECT_EQ(u->kinds, 2);
  EXPECT_EQ(u->ended_round, 4);
  auto added = parse_elastic_update("1 0");
  ASSERT_TRUE(added.ok());
  EXPECT_EQ(added->ended_round, 0);
  EXPECT_FALSE(parse_elastic_update("3").ok());
  EXPECT_FALSE(parse_elastic_update("a 1").ok());
}

}  // namespace
}  // namespace hvdrun
