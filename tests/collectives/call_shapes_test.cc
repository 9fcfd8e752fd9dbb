// The shapes hvd_next_call gives a call: encoded as Spec::shapes, and refused unless they
// describe the call's tensors.
#include "collectives/call_shapes.h"

#include <gtest/gtest.h>

namespace hvdrun {
namespace {

Spec of(OpKind kind, std::vector<uint64_t> counts, uint64_t row_elems = 0) {
  Spec s;
  s.name = "t";
  s.kind = kind;
  s.counts = std::move(counts);
  s.row_elems = row_elems;
  return s;
}

TEST(CallShapes, EachTensorsDimensionsFollowItsNumberOfDimensions) {
  const int ndims[] = {2, 0, 1};
  const long long dims[] = {17, 1311, 5};
  auto e = encode_shapes(3, ndims, dims);
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(*e, (std::vector<int64_t>{2, 17, 1311, 0, 1, 5}));
  auto none = encode_shapes(0, nullptr, nullptr);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST(CallShapes, NegativeOrTooManyDimensionsAreRefused) {
  const int bad_nd[] = {33};
  EXPECT_EQ(encode_shapes(1, bad_nd, nullptr).error().kind, ErrorKind::kInvalidArgument);
  const int nd[] = {1};
  const long long neg[] = {-4};
  EXPECT_NE(encode_shapes(1, nd, neg).error().message.find("dimension 0 is -4"), std::string::npos);
  EXPECT_FALSE(encode_shapes(-1, nd, neg));
  EXPECT_FALSE(encode_shapes(1, nullptr, neg));
  EXPECT_FALSE(encode_shapes(1, nd, nullptr));
}

TEST(CallShapes, AllreduceShapesMustMultiplyToEachCount) {
  Spec s = of(OpKind::kAllreduce, {6, 1});
  ASSERT_TRUE(apply_shapes("w", {2, 2, 3, 0}, &s));
  EXPECT_EQ(s.shapes, (std::vector<int64_t>{2, 2, 3, 0}));  // a scalar holds one element
  Spec t = of(OpKind::kAllreduce, {6});
  auto wrong = apply_shapes("w", {2, 2, 4}, &t);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().message, "w: the shape does not hold its 6 elements");
  EXPECT_TRUE(t.shapes.empty());
  EXPECT_FALSE(apply_shapes("w", {1, 6, 1, 6}, &t)) << "two shapes for one tensor";
  Spec two = of(OpKind::kAllreduce, {6, 6});
  EXPECT_FALSE(apply_shapes("w", {1, 6}, &two)) << "one shape for two tensors";
}

TEST(CallShapes, RowShapedCallsTakeTheRowsFirstThenTheRowsShape) {
  Spec g = of(OpKind::kAllgatherv, {4}, 6);
  EXPECT_TRUE(apply_shapes("w", {3, 4, 2, 3}, &g));
  Spec rs = of(OpKind::kReducescatter, {4}, 6);
  EXPECT_FALSE(apply_shapes("w", {2, 6, 4}, &rs)) << "the first dimension is not the rows";
  EXPECT_FALSE(apply_shapes("w", {0}, &rs)) << "a scalar has no rows";
  // A 0-d allgather or alltoall tensor passes as one row of one element: the negotiation
  // refuses it on every rank (a refusal here would leave the other ranks waiting).
  Spec scalar = of(OpKind::kAllgatherv, {1}, 1);
  EXPECT_TRUE(apply_shapes("w", {0}, &scalar));
  Spec scalar_rs = of(OpKind::kReducescatter, {1}, 1);
  EXPECT_FALSE(apply_shapes("w", {0}, &scalar_rs)) << "reducescatter refuses a scalar locally, as Horovod";
  Spec not_one = of(OpKind::kAllgatherv, {2}, 1);
  EXPECT_FALSE(apply_shapes("w", {0}, &not_one)) << "a 0-d tensor holds one element";
  Spec b = of(OpKind::kBarrier, {});
  EXPECT_FALSE(apply_shapes("w", {1, 1}, &b));
  EXPECT_TRUE(apply_shapes("w", {}, &b)) << "no shapes: nothing to check";
}

}  // namespace
}  // namespace hvdrun
