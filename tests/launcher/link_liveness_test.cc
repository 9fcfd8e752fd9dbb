// The link's liveness, both ends' rule: silent past the time-out is gone, unless hvdrun
// relayed a Ctrl-Z's SIGSTOP (then the count restarts at its SIGCONT).
#include "launcher/link_liveness.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace hvdrun {
namespace {

using Clock = LinkLiveness::Clock;

Clock::time_point at(double s) {
  return Clock::time_point() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

TEST(LinkLiveness, SilentPastTheTimeoutIsLost) {
  LinkLiveness l(30, at(0));
  EXPECT_FALSE(l.lost(at(30)));
  EXPECT_TRUE(l.lost(at(30.5)));
  l.heard(at(29));
  EXPECT_FALSE(l.lost(at(58)));
  EXPECT_TRUE(l.lost(at(60)));
  EXPECT_DOUBLE_EQ(l.quiet_s(at(60)), 31);
}

TEST(LinkLiveness, ACtrlZHoldsTheCountUntilItsSigcont) {
  LinkLiveness l(30, at(0));
  l.relayed(SIGSTOP, at(1));
  EXPECT_TRUE(l.held());
  EXPECT_FALSE(l.lost(at(3600)));  // stopped for an hour: not lost
  l.relayed(SIGUSR1, at(3600));
  EXPECT_FALSE(l.lost(at(3601)));
  l.relayed(SIGCONT, at(3601));  // fg: the count starts again now
  EXPECT_FALSE(l.held());
  EXPECT_FALSE(l.lost(at(3630)));
  EXPECT_TRUE(l.lost(at(3632)));
}

TEST(LinkLiveness, ASigcontWithoutAStopRestartsNothing) {
  LinkLiveness l(30, at(0));
  l.relayed(SIGCONT, at(20));
  EXPECT_TRUE(l.lost(at(31)));
}

}  // namespace
}  // namespace hvdrun
