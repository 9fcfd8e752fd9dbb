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

TEST(Ring, AJobOfOneAttachesNoSegment) {
  auto rings = make_rings(1);
  std::string why = "untouched";
  auto attached = rings[0]->attach_group("h", SIZE_MAX, &why);
  ASSERT_TRUE(attached.ok());
  EXPECT_FALSE(*attached);
  EXPECT_EQ(why, "untouched");
}

// A rank that closes its ring closes its side of the segment too: the others' next
// allreduce through it fails at its barrier, naming that rank, instead of waiting out the
// time-out.
TEST(Ring, ClosingARankEndsTheOthersSegmentBarrier) {
  const int n = 3;
  RingOptions o;
  o.timeout_s = 60;
  auto rings = make_rings(n, o, "group");
  for (auto& r : rings) ASSERT_TRUE(r);
  rings[0]->close("rank 0 gave up");
  std::vector<Error> errors(n);
  on_all_void(n, [&](int r) {
    if (r == 0) return;
    std::vector<float> buf(10, 1.f);
    auto s = rings[r]->allreduce(buf.data(), buf.data(), buf.size(), HVD_FLOAT32, HVD_OP_SUM);
    errors[r] = s ? Error{"ok"} : s.error();
  });
  for (int r : {1, 2}) {
    EXPECT_EQ(errors[r].kind, ErrorKind::kPeerLost) << "rank " << r << ": " << errors[r].message;
    EXPECT_NE(errors[r].message.find("rank 0"), std::string::npos) << "rank " << r << ": " << errors[r].message;
    EXPECT_TRUE(rings[r]->broken());
  }
}

}  // namespace
}  // namespace hvdrun
