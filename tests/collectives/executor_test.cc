// The executor's eager reduction: every rank's data of a host allreduce, reduced in rank
// order into this rank's buffers, with the postscale and an average's 1/size. (The kinds
// it runs on the ring: engine_test.cc, with ranks as threads.)
#include "collectives/engine/executor.h"

#include <gtest/gtest.h>

#include <vector>

#include "collectives/engine/pending_op.h"

namespace hvdrun {
namespace {

Spec floats(std::vector<uint64_t> counts, hvd_op_t op, double post = 1) {
  Spec s;
  s.name = "x";
  s.kind = OpKind::kAllreduce;
  s.dtype = HVD_FLOAT64;
  s.op = static_cast<uint8_t>(op);
  s.postscale = post;
  s.counts = std::move(counts);
  return s;
}

TEST(Executor, EagerDataIsReducedInRankOrderIntoTheCallersBuffer) {
  Executor ex(/*ring=*/nullptr, /*rank=*/1, /*size=*/3);  // the eager reduction uses no ring
  const double r0[2] = {1, 5}, r1[2] = {2, -4}, r2[2] = {3, 9};
  std::vector<const char*> data = {reinterpret_cast<const char*>(r0), reinterpret_cast<const char*>(r1),
                                   reinterpret_cast<const char*>(r2)};
  double out[2] = {0, 0};
  PendingOp op;
  op.req.spec = floats({2}, HVD_OP_MAX);
  op.req.tensors = {{r1, out}};
  ex.reduce_eager(op.req.spec, data, op);
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[1], 9);
}

TEST(Executor, EagerAverageOfAGroupIsScaledIntoEachTensor) {
  Executor ex(nullptr, 0, 2);
  // Two tensors (1 and 2 elements) one after another in each rank's data.
  const double r0[3] = {2, 4, 6}, r1[3] = {6, 8, 10};
  std::vector<const char*> data = {reinterpret_cast<const char*>(r0), reinterpret_cast<const char*>(r1)};
  double a[1] = {0}, b[2] = {0, 0};
  PendingOp op;
  op.req.spec = floats({1, 2}, HVD_OP_AVERAGE, /*post=*/0.5);
  op.req.tensors = {{r0, a}, {r0 + 1, b}};
  ex.reduce_eager(op.req.spec, data, op);
  EXPECT_EQ(a[0], (2 + 6) / 2.0 * 0.5);
  EXPECT_EQ(b[0], (4 + 8) / 2.0 * 0.5);
  EXPECT_EQ(b[1], (6 + 10) / 2.0 * 0.5);
}

}  // namespace
}  // namespace hvdrun
