// Collectives across real processes started by hvdrun.
#include <dirent.h>
#include <gtest/gtest.h>

#include <set>

#include "process.h"

using namespace testing_hvdrun;

namespace {
const std::string kHvdrun = HVDRUN_BIN;
const std::string kColl = COLL_WORKER_BIN;

std::set<std::string> dev_shm() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.insert(e->d_name);
    closedir(d);
  }
  return names;
}
}  // namespace

// Ranks of one host: over shared memory (the default; each rank maps the ring it sends on
// and the one it receives from), or over loopback TCP with HVDRUN_SHM=0.
class CollectivesLaunch : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(CollectivesLaunch, ResultsAreRightOnEveryRank) {
  auto [n, shm] = GetParam();
  auto before = dev_shm();
  auto o = run({kHvdrun, "-np", std::to_string(n), kColl, "check"}, 240, {{"HVDRUN_SHM", shm ? "1" : "0"}});
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  int segments = shm && n > 1 ? 2 : 0;
  for (int r = 0; r < n; ++r)
    EXPECT_NE(o.out.find("[" + std::to_string(r) + "]<stdout>:rank " + std::to_string(r) + " checked (" +
                         std::to_string(segments) + " shared segments)"),
              std::string::npos)
        << o.out;
  EXPECT_EQ(dev_shm(), before);
}
INSTANTIATE_TEST_SUITE_P(Sizes, CollectivesLaunch,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 7), ::testing::Bool()));

class CollectivesLaunchFailures : public ::testing::TestWithParam<bool> {};

// Over shared memory the dead rank closes nothing: its peers notice through the TCP
// connection kept beside each ring (and hvdrun through the wait status).
TEST_P(CollectivesLaunchFailures, PeerKilledMidAllreduceFailsTheJobFast) {
  auto before = dev_shm();
  auto o = run({kHvdrun, "-np", "3", "--kill-grace", "2", kColl, "die"}, 120, {{"HVDRUN_SHM", GetParam() ? "1" : "0"}});
  ASSERT_FALSE(o.timed_out) << "a dead peer hung the job";
  EXPECT_EQ(o.exit_code, 137) << o.err;
  EXPECT_NE(o.err.find("hvdrun: rank 1 (host localhost) was killed by signal 9 (SIGKILL)"), std::string::npos)
      << o.err;
  EXPECT_EQ(dev_shm(), before);
}
INSTANTIATE_TEST_SUITE_P(Transports, CollectivesLaunchFailures, ::testing::Bool());

TEST(CollectivesLaunchFailuresShm, SurvivorsNameTheKilledLocalPeer) {
  auto o = run({kHvdrun, "-np", "3", "--kill-grace", "30", kColl, "die"}, 120);
  ASSERT_FALSE(o.timed_out) << "a dead peer hung the job";
  EXPECT_NE(o.exit_code, 0);
  // Rank 2 receives from rank 1: it fails at once naming it, long before the kill grace.
  EXPECT_NE(o.err.find("rank 2: connection to rank 1 (host localhost) closed (the peer exited or failed)"),
            std::string::npos)
      << o.err;
}

TEST(CollectivesLaunchMismatch, MismatchedCountsAreAClearError) {
  auto o = run({kHvdrun, "-np", "2", kColl, "mismatch"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("called allreduce(count=10, float32, sum)"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("called allreduce(count=11, float32, sum)"), std::string::npos) << o.err;
}
