// Fusion's pure parts: which responses run together through the buffer, and in what order
// every rank puts them (the buffer's allreduce itself runs in engine_test.cc).
#include "collectives/engine/fusion.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collectives/engine/negotiation.h"

namespace hvdrun {
namespace {

Response resp(const std::string& name, uint64_t count, hvd_dtype_t dtype = HVD_FLOAT32, hvd_op_t op = HVD_OP_SUM,
              OpKind kind = OpKind::kAllreduce) {
  Response r;
  r.name = name;
  r.spec.name = name;
  r.spec.kind = kind;
  r.spec.dtype = static_cast<uint8_t>(dtype);
  r.spec.op = static_cast<uint8_t>(op);
  r.spec.counts = {count};
  return r;
}

std::vector<std::string> names(const std::vector<Response>& rs) {
  std::vector<std::string> v;
  for (auto& r : rs) v.push_back(r.name);
  return v;
}

TEST(Fusion, FusableResponsesOfAKindGatherWhereTheFirstIsOthersKeepTheirOrder) {
  std::vector<Response> rs = {resp("f1", 4),
                              resp("d1", 4, HVD_FLOAT64),
                              resp("b", 4, HVD_FLOAT32, HVD_OP_SUM, OpKind::kBroadcast),
                              resp("f2", 4, HVD_FLOAT32, HVD_OP_AVERAGE),
                              resp("d2", 4, HVD_FLOAT64),
                              resp("m", 4, HVD_FLOAT32, HVD_OP_MAX)};
  group_fusable(&rs);
  // An average reduces as a sum: f2 goes with f1.
  EXPECT_EQ(names(rs), (std::vector<std::string>{"f1", "f2", "d1", "d2", "b", "m"}));
}

TEST(Fusion, ABatchEndsAtTheThresholdAnotherKindOrALargeTensor) {
  std::vector<Response> rs = {resp("a", 100), resp("b", 100), resp("c", 100), resp("i", 100, HVD_INT32),
                              resp("d", 100)};
  EXPECT_EQ(fusion_batch_end(rs, 0, 1 << 20), 3u);  // a b c; the int32 one is another kind
  EXPECT_EQ(fusion_batch_end(rs, 0, 800), 2u);      // 400 bytes each: two fit
  EXPECT_EQ(fusion_batch_end(rs, 0, 0), 0u);        // threshold 0: no fusion
  EXPECT_EQ(fusion_batch_end(rs, 0, 300), 0u);      // larger than the buffer: alone
  rs[1] = resp("big", 1 << 20);                     // 4 MiB: goes alone, in place
  EXPECT_EQ(fusion_batch_end(rs, 0, 64 << 20), 1u);
  EXPECT_EQ(fusion_batch_end(rs, 1, 64 << 20), 1u);
  rs[2].status = Error{"mismatch"};
  EXPECT_EQ(fusion_batch_end(rs, 2, 64 << 20), 2u) << "a failed response never runs";
}

}  // namespace
}  // namespace hvdrun
