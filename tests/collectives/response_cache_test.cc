// The response cache: ids, LRU eviction, capacity 0.
#include "collectives/engine/response_cache.h"

#include <gtest/gtest.h>

#include "negotiation_test_util.h"

namespace hvdrun {
namespace {

using namespace negotiation_test;

TEST(ResponseCache, NewNamesTakeTheLowestFreeIdAndTheLeastRecentlyUsedMakesRoom) {
  ResponseCache cache(2);
  std::string evicted;
  cache.put("a", allreduce("a"), &evicted);
  cache.put("b", allreduce("b"), &evicted);
  EXPECT_EQ(cache.find("a")->id, 0);
  EXPECT_EQ(cache.find("b")->id, 1);
  const uint64_t epoch = cache.epoch();
  cache.put("a", allreduce("a"), &evicted);  // ran again: used, not moved
  EXPECT_EQ(evicted, "");
  EXPECT_EQ(cache.epoch(), epoch);
  cache.put("c", allreduce("c"), &evicted);
  EXPECT_EQ(evicted, "b");
  EXPECT_EQ(cache.find("c")->id, 1);
  EXPECT_EQ(*cache.name_at(1), "c");
  EXPECT_GT(cache.epoch(), epoch);
  EXPECT_TRUE(cache.erase("a"));
  EXPECT_EQ(cache.name_at(0), nullptr);
  EXPECT_FALSE(cache.erase("a"));
}

TEST(ResponseCache, CapacityZeroKeepsNothing) {
  ResponseCache cache(0);
  std::string evicted;
  cache.put("a", allreduce("a"), &evicted);
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace hvdrun
