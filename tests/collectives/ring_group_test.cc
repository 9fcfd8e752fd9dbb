// The host's shared segment attached to a ring (collectives/ring_group.cc).
#include "collectives/ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

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

// Once the segment is attached, the engine's exchange goes through it (every rank's
// message, those larger than a slot through the ring) and a rank idle between cycles sees a
// peer that began one even when that peer is not its left neighbour (the ring would tell
// only rank 2): the engine's idle wait joins the cycle.
TEST(Ring, TheExchangeGoesThroughTheSegmentAndAnIdleRankSeesAPeerBeginIt) {
  const int n = 3;
  RingOptions o;
  o.timeout_s = 20;
  auto rings = make_rings(n, o, "group");
  for (auto& r : rings) ASSERT_TRUE(r);
  const size_t big = (size_t{64} << 10) + 1000;  // past a slot (64 KiB here): the ring carries it
  std::atomic<bool> seen{false};
  auto errors = on_all(n, [&](int r) -> std::string {
    for (size_t len : {size_t{0}, size_t{100}, big}) {
      if (r != 1 && len == 100) {  // rank 1 begins this exchange; rank 0 sees it
        if (r == 0) {
          for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
               !rings[0]->left_readable() && std::chrono::steady_clock::now() < until;)
            std::this_thread::yield();
          seen = rings[0]->left_readable();
        }
        for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
             r == 2 && !seen && std::chrono::steady_clock::now() < until;)
          std::this_thread::yield();
      }
      std::vector<std::string> all(n);
      all[r].assign(Ring::kFrameBytes, '\0');
      for (size_t i = 0; i < len + r; ++i) all[r].push_back(static_cast<char>('a' + (i * 7 + r) % 26));
      if (auto s = rings[r]->allgather_bytes(&all); !s) return std::to_string(len) + " bytes: " + s.error().message;
      for (int p = 0; p < n; ++p) {
        if (all[p].size() != Ring::kFrameBytes + len + p) return "wrong length from rank " + std::to_string(p);
        for (size_t i = 0; i < len + p; ++i)
          if (all[p][Ring::kFrameBytes + i] != static_cast<char>('a' + (i * 7 + p) % 26))
            return "wrong byte " + std::to_string(i) + " from rank " + std::to_string(p);
      }
    }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  EXPECT_TRUE(seen) << "rank 0 did not see rank 1 begin the exchange";
  EXPECT_FALSE(rings[0]->left_readable());  // every rank has taken part: nothing pending
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
