// The host's shared segment attached to a ring (collectives/ring_group.cc).
#include "collectives/ring.h"

#include <gtest/gtest.h>

#include "ring_fixture.h"

namespace hvdrun {
namespace {

using namespace ringtest;

TEST(Ring, TheHostSegmentsSlotIsASegmentWithinBounds) {
  EXPECT_EQ(group_slot_bytes(256 << 10, 4), size_t{256} << 10);  // the default: a segment
  EXPECT_EQ(group_slot_bytes(size_t{1} << 30, 4), size_t{1} << 20);  // at most 1 MiB
  EXPECT_EQ(group_slot_bytes(256 << 10, 256), size_t{128} << 10);  // at most 32 MiB in all
  EXPECT_EQ(group_slot_bytes(256 << 10, 1 << 20), size_t{4096});  // at least a page
}

}  // namespace
}  // namespace hvdrun
