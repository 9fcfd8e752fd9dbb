// The checks of a collective's buffers before it is submitted (collectives/buffer_checks).
#include "collectives/buffer_checks.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace hvdrun {
namespace {

// Issue 30.8: a byte count that wraps, or a buffer that would end past the top of the
// address space, is refused naming the value and the most that fits.
TEST(BufferChecks, CountsThatDoNotFitBelowTheTopOfTheAddressSpaceAreRefused) {
  float x[4] = {};
  auto s = check_broadcast_buffer("hvd_broadcast", x, size_t{1} << 62, HVD_FLOAT32);  // 2^64 bytes: 0 if wrapped
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_NE(s.error().message.find("hvd_broadcast: count 4611686018427387904 is too large: buf at "), std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find("float32 elements below the top of the address space"), std::string::npos);
  // A buffer 8 bytes below the top holds two float32, not three.
  auto* near_top = reinterpret_cast<void*>(address_space_top() - 8);
  EXPECT_TRUE(check_broadcast_buffer("b", near_top, 2, HVD_FLOAT32));
  s = check_broadcast_buffer("b", near_top, 3, HVD_FLOAT32);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("count 3 is too large: buf at " ), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("can hold at most 2 float32 elements"), std::string::npos) << s.error().message;
  // rows x row_elems, and what every rank sends together (the engine's sums over ranks).
  s = check_allgather_buffers("hvd_allgatherv_async", x, nullptr, 1, SIZE_MAX, HVD_INT8, 0, 2);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("row_elems 18446744073709551615 is too large"), std::string::npos);
  s = check_allgather_buffers("hvd_allgatherv_async", x, nullptr, address_space_top() / 2, 1, HVD_INT8, 0, 4);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("the output can hold at most"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("rows of 1 int8 elements from each of 4 ranks"), std::string::npos);
  // Nothing to move: any count of zero-sized rows, null buffers with no elements.
  EXPECT_TRUE(check_reducescatter_buffers("r", nullptr, nullptr, SIZE_MAX, SIZE_MAX / 2, 0, HVD_FLOAT64));
  EXPECT_TRUE(check_allgather_buffers("a", nullptr, nullptr, 0, 7, HVD_FLOAT64, 0, 3));
}

// A row's bytes times size() wrapped to 0 (a row of 2^55 bytes, 512 ranks): the bound on
// what every rank sends together let any row size through in a job of 256 ranks or more.
TEST(BufferChecks, ARowTimesTheRanksThatWrapsIsRefused) {
  char x = 0;
  const size_t row = size_t{1} << 55;
  auto s = check_allgather_buffers("hvd_allgatherv_async", &x, nullptr, 1, row, HVD_INT8, 0, 512);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_NE(s.error().message.find("from each of 512 ranks"), std::string::npos) << s.error().message;
  s = check_alltoall_buffers("hvd_alltoall", &x, 1, row, nullptr, HVD_INT8, 512);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("from each of 512 ranks"), std::string::npos) << s.error().message;
  // Not wrapped: the same row in 2 ranks fits.
  EXPECT_TRUE(check_allgather_buffers("hvd_allgatherv_async", &x, nullptr, 1, row, HVD_INT8, 0, 2));
}

TEST(BufferChecks, SplitsWhoseSumWrapsAreRefused) {
  int x = 0;
  size_t splits[3] = {size_t{1} << 63, size_t{1} << 63, 5};  // add up to 5 if wrapped
  auto s = check_alltoall_buffers("hvd_alltoall", &x, 5, 1, splits, HVD_INT8, 3);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("splits[1] = 9223372036854775808 makes the splits add up past"), std::string::npos)
      << s.error().message;
  size_t fine[3] = {1, 0, 4};
  EXPECT_TRUE(check_alltoall_buffers("hvd_alltoall", &x, 5, 1, fine, HVD_INT8, 3));
  s = check_alltoall_buffers("hvd_alltoall", &x, 6, 1, fine, HVD_INT8, 3);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("splits add up to 5 rows, but rows is 6"), std::string::npos);
}

// In place is the same pointer; any other overlap of a result with an input or another
// result is refused (it gave wrong data).
TEST(BufferChecks, PartlyOverlappingBuffersAreRefusedInPlaceIsNot) {
  float a[64] = {};
  const void* s1[1] = {a};
  void* same[1] = {a};
  void* shifted[1] = {a + 1};
  size_t c[1] = {16};
  EXPECT_TRUE(check_allreduce_buffers("hvd_allreduce", 1, s1, same, c, HVD_FLOAT32));
  auto s = check_allreduce_buffers("hvd_allreduce", 1, s1, shifted, c, HVD_FLOAT32);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_NE(s.error().message.find("hvd_allreduce: recvbuf ("), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find(", 64 bytes) overlaps sendbuf ("), std::string::npos) << s.error().message;
  // Groups: tensor 1 in place, tensors 0 and 2 apart; then tensor 0's result on tensor 2's
  // input; then tensor 2's input on tensor 1's in-place result; then two results in one place.
  const void* s3[3] = {a, a + 16, a + 32};
  size_t c3[3] = {8, 8, 8};
  void* ok[3] = {a + 48, a + 16, a + 56};
  EXPECT_TRUE(check_allreduce_buffers("g", 3, s3, ok, c3, HVD_FLOAT32));
  void* onto[3] = {a + 36, a + 16, a + 56};
  s = check_allreduce_buffers("g", 3, s3, onto, c3, HVD_FLOAT32);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("recvbufs[0]"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("sendbufs[2]"), std::string::npos) << s.error().message;
  const void* into[3] = {a, a + 16, a + 20};  // tensor 2's input half in tensor 1's in-place result
  s = check_allreduce_buffers("g", 3, into, ok, c3, HVD_FLOAT32);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("recvbufs[1]"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("sendbufs[2]"), std::string::npos) << s.error().message;
  void* twice[3] = {a + 48, a + 48, a + 56};  // two results in one place
  EXPECT_FALSE(check_allreduce_buffers("g", 3, s3, twice, c3, HVD_FLOAT32));
  // Allgather: in place at the start of recvbuf or at this rank's block; elsewhere refused.
  EXPECT_TRUE(check_allgather_buffers("hvd_allgather", a, a, 8, 1, HVD_FLOAT32, 2, 4));
  EXPECT_TRUE(check_allgather_buffers("hvd_allgather", a + 16, a, 8, 1, HVD_FLOAT32, 2, 4));
  EXPECT_FALSE(check_allgather_buffers("hvd_allgather", a + 1, a, 8, 1, HVD_FLOAT32, 2, 4));
  // Reducescatter: in place, or apart.
  EXPECT_TRUE(check_reducescatter_buffers("r", a, a, 8, 2, 4, HVD_FLOAT32));
  EXPECT_FALSE(check_reducescatter_buffers("r", a, a + 4, 8, 2, 4, HVD_FLOAT32));
  EXPECT_TRUE(check_reducescatter_buffers("r", a, a + 32, 8, 2, 4, HVD_FLOAT32));
}

}  // namespace
}  // namespace hvdrun
