// The names of blocking calls (Runtime::BlockingName): what makes repeated blocking calls of
// one shape hit the engine's response cache, and concurrent ones distinct.
#include <gtest/gtest.h>

#include <optional>

#include "collectives/runtime.h"

namespace hvdrun {
namespace {

TEST(BlockingName, ASingleThreadedProgramReusesOneNamePerKind) {
  Runtime& rt = Runtime::instance();
  for (int i = 0; i < 3; ++i) {
    Runtime::BlockingName a(rt, "allreduce");
    EXPECT_EQ(a.name(), "hvdrun.allreduce.0") << "call " << i;
  }
  Runtime::BlockingName b(rt, "broadcast");
  EXPECT_EQ(b.name(), "hvdrun.broadcast.0") << "kinds have their own slots";
}

TEST(BlockingName, CallsInFlightTogetherGetTheLowestFreeSlots) {
  Runtime& rt = Runtime::instance();
  std::optional<Runtime::BlockingName> a, b, c;
  a.emplace(rt, "allgather");
  b.emplace(rt, "allgather");
  c.emplace(rt, "allgather");
  EXPECT_EQ(a->name(), "hvdrun.allgather.0");
  EXPECT_EQ(b->name(), "hvdrun.allgather.1");
  EXPECT_EQ(c->name(), "hvdrun.allgather.2");
  b.reset();  // its call is over: the next call takes its slot
  Runtime::BlockingName d(rt, "allgather");
  EXPECT_EQ(d.name(), "hvdrun.allgather.1");
}

}  // namespace
}  // namespace hvdrun
