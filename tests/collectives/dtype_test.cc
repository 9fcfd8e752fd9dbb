// float16 and bfloat16 conversions (collectives/dtype.h).
#include "collectives/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace hvdrun {
namespace {

TEST(Dtype, HalfAndBfloat16RoundTripAndRoundToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    uint16_t x = static_cast<uint16_t>(h);
    bool nan = (x & 0x7c00) == 0x7c00 && (x & 0x3ff);
    if (!nan) {
      ASSERT_EQ(float_to_half(half_to_float(x)), x) << h;
    }
    bool bnan = (x & 0x7f80) == 0x7f80 && (x & 0x7f);
    if (!bnan) {
      ASSERT_EQ(float_to_bf16(bf16_to_float(x)), x) << h;
    }
  }
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);      // tie -> even (down)
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);      // tie -> even (up)
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);                // overflows to inf
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);   // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);   // tie -> even (zero)
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);       // tie -> even
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
}


}  // namespace
}  // namespace hvdrun
