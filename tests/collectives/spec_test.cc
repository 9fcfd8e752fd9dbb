// What a rank announces for a name: which fields must agree, the kinds' names and shapes.
#include "collectives/engine/spec.h"

#include <gtest/gtest.h>

#include <string>

namespace hvdrun {
namespace {

Spec grouped() {
  Spec s;
  s.name = "g";
  s.kind = OpKind::kAllreduce;
  s.counts = {3, 5};
  s.dtypes = {HVD_FLOAT32, HVD_INT64};
  return s;
}

TEST(Spec, EveryAgreedFieldMustBeTheSame) {
  const Spec base = grouped();
  EXPECT_TRUE(base.same_as(base));
  auto differs = [&](auto change) {
    Spec o = base;
    change(o);
    return !base.same_as(o);
  };
  EXPECT_TRUE(differs([](Spec& o) { o.name = "h"; }));
  EXPECT_TRUE(differs([](Spec& o) { o.kind = OpKind::kBroadcast; }));
  EXPECT_TRUE(differs([](Spec& o) { o.dtype = HVD_FLOAT64; }));
  EXPECT_TRUE(differs([](Spec& o) { o.op = HVD_OP_MAX; }));
  EXPECT_TRUE(differs([](Spec& o) { o.root = 1; }));
  EXPECT_TRUE(differs([](Spec& o) { o.prescale = 2; }));
  EXPECT_TRUE(differs([](Spec& o) { o.postscale = 0.5; }));
  EXPECT_TRUE(differs([](Spec& o) { o.device = true; }));
  EXPECT_TRUE(differs([](Spec& o) { o.counts = {3, 6}; }));
  EXPECT_TRUE(differs([](Spec& o) { o.row_elems = 4; }));
  EXPECT_TRUE(differs([](Spec& o) { o.splits = {1}; }));
  EXPECT_TRUE(differs([](Spec& o) { o.dtypes = {HVD_FLOAT32, HVD_INT32}; }));
  // A refusal is no field of the spec: it pairs with the other ranks' request.
  EXPECT_FALSE(differs([](Spec& o) { o.refused = true; }));
}

TEST(Spec, AGroupsTensorsEachHaveTheirDtype) {
  Spec s = grouped();
  EXPECT_EQ(s.dtype_at(0), HVD_FLOAT32);
  EXPECT_EQ(s.dtype_at(1), HVD_INT64);
  s.dtypes.clear();
  s.dtype = HVD_INT8;
  EXPECT_EQ(s.dtype_at(1), HVD_INT8);
}

TEST(Spec, KindsHaveNamesShapesAndCacheability) {
  EXPECT_STREQ(op_kind_name(OpKind::kAllreduce), "allreduce");
  EXPECT_STREQ(op_kind_name(OpKind::kAllgatherv), "allgather");
  EXPECT_STREQ(op_kind_name(OpKind::kReducescatter), "reducescatter");
  EXPECT_STREQ(op_kind_name(OpKind::kJoin), "join");
  EXPECT_STREQ(op_kind_name(static_cast<OpKind>(99)), "?");
  EXPECT_TRUE(per_rank_rows(OpKind::kAllgatherv));
  EXPECT_TRUE(per_rank_rows(OpKind::kAlltoall));
  EXPECT_FALSE(per_rank_rows(OpKind::kAllreduce));
  EXPECT_TRUE(cacheable(OpKind::kBroadcast));
  EXPECT_FALSE(cacheable(OpKind::kAllgatherv));
  EXPECT_FALSE(cacheable(OpKind::kJoin));
}

TEST(Spec, AZeroDimensionalTensorIsOneWithNoDimensionInTheShapes) {
  Spec s = grouped();  // two tensors
  EXPECT_FALSE(has_zero_dim(s)) << "no shapes given";
  s.shapes = {1, 3, 2, 1, 5};
  EXPECT_FALSE(has_zero_dim(s));
  s.shapes = {1, 3, 0};
  EXPECT_TRUE(has_zero_dim(s)) << "the second tensor is 0-d";
  s.shapes = {0, 0, 7};
  EXPECT_FALSE(has_zero_dim(s)) << "shapes that do not describe the tensors";
}

TEST(Spec, AnAverageGoesOverTheWireAsASum) {
  Spec s;
  s.op = HVD_OP_AVERAGE;
  EXPECT_EQ(wire_op(s), HVD_OP_SUM);
  s.op = HVD_OP_MIN;
  EXPECT_EQ(wire_op(s), HVD_OP_MIN);
}

}  // namespace
}  // namespace hvdrun
