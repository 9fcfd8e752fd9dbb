// Eager reductions' layout: which host allreduces travel with the negotiation, where their
// data lies in a rank's message, and finding every rank's data in one cycle's messages.
#include "collectives/engine/eager.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collectives/engine/cycle_message.h"
#include "collectives/engine/response_cache.h"

namespace hvdrun {
namespace {

Spec floats(const std::string& name, std::vector<uint64_t> counts) {
  Spec s;
  s.name = name;
  s.kind = OpKind::kAllreduce;
  s.dtype = HVD_FLOAT32;
  s.counts = std::move(counts);
  return s;
}

TEST(EagerPlan, SmallHostAllreducesArePlacedAlignedWithinTheBounds) {
  EagerPlan plan(/*limit=*/1024, /*size=*/3);  // each rank receives 2 copies: 512 bytes a tensor
  size_t end = 0;
  EXPECT_EQ(plan.place(floats("a", {3}), &end), 0u);
  EXPECT_EQ(end, 12u);
  EXPECT_EQ(plan.place(floats("b", {1, 2}), &end), 16u) << "8-byte aligned";
  EXPECT_EQ(end, 28u);
  EXPECT_EQ(plan.place(floats("big", {200}), &end), EagerLayout::kNotEager) << "800 bytes x 2 copies > 1024";
  EXPECT_EQ(plan.place(floats("none", {0}), &end), EagerLayout::kNotEager) << "no data";
  Spec b = floats("bc", {3});
  b.kind = OpKind::kBroadcast;
  EXPECT_EQ(plan.place(b, &end), EagerLayout::kNotEager);
  Spec d = floats("dev", {3});
  d.device = true;
  EXPECT_EQ(plan.place(d, &end), EagerLayout::kNotEager);
  Spec mixed = floats("mixed", {1, 1});
  mixed.dtypes = {HVD_FLOAT32, HVD_INT32};
  EXPECT_EQ(plan.place(mixed, &end), EagerLayout::kNotEager);
  EXPECT_EQ(end, 28u) << "refused placements leave the end";
  // In all, what a rank receives stays within 4 times the limit.
  size_t total = 0;
  int placed = 0;
  while (plan.place(floats("t", {120}), &total) != EagerLayout::kNotEager) ++placed;
  EXPECT_EQ(placed, 4);  // 480 bytes x 2 copies each; a fifth would pass 4096
  EXPECT_EQ(EagerPlan(0, 3).place(floats("a", {1}), &end), EagerLayout::kNotEager) << "limit 0: never";
  EXPECT_EQ(EagerPlan(1024, 1).place(floats("a", {1}), &end), EagerLayout::kNotEager) << "a job of one";
}

TEST(EagerPlan, ACachedRequestsDataLiesWhereItsIdPutsItAndEveryRanksIsFound) {
  ResponseCache cache(8);
  std::string evicted;
  cache.put("x", floats("x", {2}), &evicted);
  Spec bc = floats("bc", {2});
  bc.kind = OpKind::kBroadcast;
  cache.put("bc", bc, &evicted);
  cache.put("y", floats("y", {1}), &evicted);
  EagerPlan plan(1024, 2);
  std::vector<uint64_t> bits;
  for (size_t id : {0, 1, 2}) set_bit(&bits, id);
  const EagerLayout& l = plan.layout(bits, cache);
  EXPECT_EQ(l.offset(0), 0u);
  EXPECT_EQ(l.offset(1), EagerLayout::kNotEager) << "a broadcast travels no data";
  EXPECT_EQ(l.offset(2), 8u);
  EXPECT_EQ(l.total, 12u);
  EXPECT_EQ(&plan.layout(bits, cache), &l) << "kept while the bits and the cache stay";
  // Both ranks sent both tensors, and rank 1 a fresh one announced in full.
  const float r0[3] = {1, 2, 3}, r1[4] = {10, 20, 30, 7};
  std::vector<CycleMessage> msgs(2);
  msgs[0].bits = msgs[1].bits = bits;
  msgs[0].eager = std::string_view(reinterpret_cast<const char*>(r0), 12);
  msgs[1].specs = {floats("fresh", {1})};
  std::string eager1(reinterpret_cast<const char*>(r1), 12);
  eager1.resize(20);  // the fresh tensor after the cached ones, 8-byte aligned
  std::memcpy(eager1.data() + 16, &r1[3], 4);
  msgs[1].eager = eager1;
  ASSERT_TRUE(plan.locate(msgs, cache).ok());
  std::vector<const char*> data;
  ASSERT_TRUE(plan.cached_data(2, msgs, &data));
  ASSERT_EQ(data.size(), 2u);
  EXPECT_EQ(*reinterpret_cast<const float*>(data[0]), 3.f);
  EXPECT_EQ(*reinterpret_cast<const float*>(data[1]), 30.f);
  EXPECT_EQ(plan.fresh_data("fresh"), nullptr) << "rank 0 sent no data for it";
  // A section that is not the size its bits and specs make is an error.
  msgs[0].eager = std::string_view(reinterpret_cast<const char*>(r0), 8);
  EXPECT_FALSE(plan.locate(msgs, cache).ok());
}

}  // namespace
}  // namespace hvdrun
