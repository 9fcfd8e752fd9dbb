// The element-wise kernels: reduce_pair (dst = op(a, b), one pass) must give bitwise what
// copying a and reducing b into it gives (every rank's eager result depends on it), for
// every dtype and op, at every count (the SIMD clones' tails) and alignment, NaNs included.
#include "collectives/reduce_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "collectives/dtype.h"

namespace hvdrun {
namespace {

// Deterministic bytes that are valid values of every dtype (and, for the floats, hold
// negative numbers, zeros of both signs and NaNs).
void fill(std::vector<unsigned char>& v, unsigned seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<unsigned char>(x);
  }
}

TEST(ReduceKernels, ReducePairIsCopyThenReduceBitwise) {
  const hvd_dtype_t dtypes[] = {HVD_INT8, HVD_UINT8, HVD_INT32, HVD_INT64, HVD_FLOAT16, HVD_BFLOAT16, HVD_FLOAT32,
                                HVD_FLOAT64, HVD_INT16};
  const hvd_op_t ops[] = {HVD_OP_SUM, HVD_OP_AVERAGE, HVD_OP_MIN, HVD_OP_MAX, HVD_OP_PRODUCT};
  for (auto t : dtypes)
    for (auto op : ops) {
      if (op == HVD_OP_AVERAGE && !dtype_is_float(t)) continue;
      const size_t es = dtype_size(t);
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{16}, size_t{33}, size_t{1000}, size_t{4099}})
        for (size_t skew : {size_t{0}, size_t{1}, size_t{2}}) {  // 1: every buffer misaligned (es > 1); 2: dst only
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + op_name(op) + " count " + std::to_string(count) +
                       (skew == 1 ? " misaligned" : skew == 2 ? " misaligned output" : ""));
          std::vector<unsigned char> a(count * es + 1), b(count * es + 1), want(count * es + 1, 0),
              got(count * es + 1, 0);
          fill(a, static_cast<unsigned>(count * 31 + t));
          fill(b, static_cast<unsigned>(count * 17 + op + 99));
          const size_t in = skew == 1 ? 1 : 0, out = skew == 0 ? 0 : 1;
          std::memcpy(want.data() + out, a.data() + in, count * es);
          reduce_into(want.data() + out, b.data() + in, count, t, op);
          reduce_pair(got.data() + out, a.data() + in, b.data() + in, count, t, op);
          ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size()), 0);
        }
    }
}

// Not only consistent with reduce_into: the values themselves, for the common case.
TEST(ReduceKernels, ReducePairComputesTheOperation) {
  std::vector<float> a(1027), b(1027), out(1027);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i) * 0.5f;
    b[i] = 3.0f - static_cast<float>(i);
  }
  reduce_pair(out.data(), a.data(), b.data(), a.size(), HVD_FLOAT32, HVD_OP_SUM);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
  reduce_pair(out.data(), a.data(), b.data(), a.size(), HVD_FLOAT32, HVD_OP_MAX);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(out[i], std::max(a[i], b[i])) << i;
  // Min and max keep their operand order: the first operand wins a tie (+0 against -0) and
  // against a NaN in the second; a NaN in the first stays. Every rank reduces in rank order,
  // so the order is what keeps results bitwise identical.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> p{+0.f, -0.f, nan, 1.f}, q{-0.f, +0.f, 1.f, nan}, r(4);
  for (hvd_op_t op : {HVD_OP_MIN, HVD_OP_MAX}) {
    reduce_pair(r.data(), p.data(), q.data(), 4, HVD_FLOAT32, op);
    EXPECT_FALSE(std::signbit(r[0])) << op_name(op);
    EXPECT_TRUE(std::signbit(r[1])) << op_name(op);
    EXPECT_TRUE(std::isnan(r[2])) << op_name(op);
    EXPECT_EQ(r[3], 1.f) << op_name(op);
  }
  std::vector<int64_t> x{1, -5, 7}, y{10, 20, -30}, z(3);
  reduce_pair(z.data(), x.data(), y.data(), 3, HVD_INT64, HVD_OP_PRODUCT);
  EXPECT_EQ(z, (std::vector<int64_t>{10, -100, -210}));
  reduce_pair(z.data(), x.data(), y.data(), 3, HVD_INT64, HVD_OP_MIN);
  EXPECT_EQ(z, (std::vector<int64_t>{1, -5, -30}));
}

// Integer sums and products wrap around (hvdrun.h), without undefined behaviour: the
// sanitizer build checks the kernels for signed overflow.
TEST(ReduceKernels, IntegerOverflowWrapsAround) {
  const int32_t max32 = std::numeric_limits<int32_t>::max(), min32 = std::numeric_limits<int32_t>::min();
  std::vector<int32_t> a{max32, min32, 65536}, b{1, -1, 65536}, out(3);
  reduce_pair(out.data(), a.data(), b.data(), 3, HVD_INT32, HVD_OP_SUM);
  EXPECT_EQ(out, (std::vector<int32_t>{min32, max32, 131072}));
  reduce_pair(out.data(), a.data(), b.data(), 3, HVD_INT32, HVD_OP_PRODUCT);
  EXPECT_EQ(out, (std::vector<int32_t>{max32, min32, 0}));
  std::vector<int64_t> c{std::numeric_limits<int64_t>::max()}, d{1};
  reduce_into(c.data(), d.data(), 1, HVD_INT64, HVD_OP_SUM);
  EXPECT_EQ(c[0], std::numeric_limits<int64_t>::min());
}

// torch.bool (one byte, 0 or 1): sum and max are a logical or, product and min a logical
// and; the result stays 0 or 1. int16 wraps around like the other integers.
TEST(ReduceKernels, BoolIsLogicalAndInt16Wraps) {
  EXPECT_EQ(dtype_size(HVD_BOOL), 1u);
  EXPECT_EQ(dtype_size(HVD_INT16), 2u);
  EXPECT_STREQ(dtype_name(HVD_BOOL), "bool");
  EXPECT_STREQ(dtype_name(HVD_INT16), "int16");
  const std::vector<unsigned char> a{0, 0, 1, 1}, b{0, 1, 0, 1};
  const std::pair<hvd_op_t, std::vector<unsigned char>> cases[] = {
      {HVD_OP_SUM, {0, 1, 1, 1}}, {HVD_OP_MAX, {0, 1, 1, 1}}, {HVD_OP_PRODUCT, {0, 0, 0, 1}}, {HVD_OP_MIN, {0, 0, 0, 1}}};
  for (const auto& [op, want] : cases) {
    std::vector<unsigned char> pair(4), into = a;
    reduce_pair(pair.data(), a.data(), b.data(), 4, HVD_BOOL, op);
    reduce_into(into.data(), b.data(), 4, HVD_BOOL, op);
    EXPECT_EQ(pair, want) << op_name(op);
    EXPECT_EQ(into, want) << op_name(op);
  }
  std::vector<int16_t> x{32767, -32768, 300}, y{1, -1, 300}, z(3);
  reduce_pair(z.data(), x.data(), y.data(), 3, HVD_INT16, HVD_OP_SUM);
  EXPECT_EQ(z, (std::vector<int16_t>{-32768, 32767, 600}));
  reduce_pair(z.data(), x.data(), y.data(), 3, HVD_INT16, HVD_OP_PRODUCT);
  EXPECT_EQ(z, (std::vector<int16_t>{32767, -32768, 24464}));  // 90000 mod 2^16
}

}  // namespace
}  // namespace hvdrun
