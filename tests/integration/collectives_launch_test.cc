// Collectives across real processes started by hvdrun.
#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
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

// The /dev/shm entries in `after` that were not in `before`, but for Python's (multiprocessing
// semaphores, torch's shared tensors): a job of this C worker makes none, and tests running
// beside this one (ctest -j) make and remove them at any moment.
std::set<std::string> added_by_this_job(const std::set<std::string>& before, const std::set<std::string>& after) {
  std::set<std::string> added;
  for (const auto& name : after)
    if (!before.count(name) && name.rfind("sem.mp-", 0) != 0 && name.rfind("torch_", 0) != 0) added.insert(name);
  return added;
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
  EXPECT_EQ(added_by_this_job(before, dev_shm()), std::set<std::string>{});
}
INSTANTIATE_TEST_SUITE_P(Sizes, CollectivesLaunch,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 7), ::testing::Bool()));

// Two "hosts" on this machine (localhost and 127.0.0.1 are different host names to the
// rendezvous): 2 x 2 ranks. Hierarchical (auto, or asked for): each rank maps its local
// ring's two segments besides the global ring's one same-host link; flat: only that one.
TEST(CollectivesLaunchHierarchical, TwoHostsTwoRanksEachHierarchicalAndFlat) {
  struct Case {
    std::vector<std::string> flags;
    std::map<std::string, std::string> env;
    int segments;
  } cases[] = {{{}, {}, 3},
               {{"--hierarchical-allreduce", "--hierarchical-allgather"}, {}, 3},
               {{}, {{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}, {"HOROVOD_HIERARCHICAL_ALLGATHER", "0"}}, 3},
               {{}, {{"HVDRUN_HIERARCHICAL_ALLREDUCE", "0"}, {"HOROVOD_HIERARCHICAL_ALLGATHER", "0"}}, 1}};
  for (const auto& c : cases) {
    auto before = dev_shm();
    std::vector<std::string> argv = {kHvdrun, "-H", "localhost:2,127.0.0.1:2"};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    argv.insert(argv.end(), {kColl, "check"});
    auto o = run(argv, 240, c.env);
    ASSERT_FALSE(o.timed_out);
    EXPECT_EQ(o.exit_code, 0) << o.err;
    for (int r = 0; r < 4; ++r)
      EXPECT_NE(o.out.find("rank " + std::to_string(r) + " checked (" + std::to_string(c.segments) + " shared segments)"),
                std::string::npos)
          << o.out;
    EXPECT_EQ(added_by_this_job(before, dev_shm()), std::set<std::string>{});
  }
}

TEST(CollectivesLaunchHierarchical, BadValueAndUnevenHostsAreClearErrors) {
  auto o = run({kHvdrun, "-H", "localhost:2,127.0.0.1:2", kColl, "check"}, 120,
               {{"HOROVOD_HIERARCHICAL_ALLREDUCE", "maybe"}});
  ASSERT_FALSE(o.timed_out);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("HOROVOD_HIERARCHICAL_ALLREDUCE='maybe': expected auto, 1 or 0"), std::string::npos) << o.err;
  o = run({kHvdrun, "-H", "localhost:2,127.0.0.1:1", "--hierarchical-allreduce", kColl, "check"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("hierarchical collectives: the hosts have different numbers of ranks"), std::string::npos)
      << o.err;
  // auto: uneven hosts simply stay flat.
  o = run({kHvdrun, "-H", "localhost:2,127.0.0.1:1", kColl, "check"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
}

TEST(CollectivesLaunchHierarchical, PeerKilledMidHierarchicalAllreduceFailsTheJobFast) {
  auto before = dev_shm();
  auto o = run({kHvdrun, "-H", "localhost:2,127.0.0.1:2", "--kill-grace", "2", kColl, "die"}, 120);
  ASSERT_FALSE(o.timed_out) << "a dead peer hung the job";
  EXPECT_EQ(o.exit_code, 137) << o.err;
  EXPECT_NE(o.err.find("hvdrun: rank 1 (host localhost) was killed by signal 9 (SIGKILL)"), std::string::npos) << o.err;
  EXPECT_EQ(added_by_this_job(before, dev_shm()), std::set<std::string>{});
}

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
  EXPECT_EQ(added_by_this_job(before, dev_shm()), std::set<std::string>{});
}
INSTANTIATE_TEST_SUITE_P(Transports, CollectivesLaunchFailures, ::testing::Bool());

// Param: HVDRUN_SHM_ALLREDUCE_BYTES. auto: the allreduce goes through the host's shared
// segment, whose barrier watches every peer through a pidfd; 0: through the shared-memory
// ring, whose TCP connection beside it reads EOF.
class CollectivesLaunchFailuresShm : public ::testing::TestWithParam<const char*> {};

TEST_P(CollectivesLaunchFailuresShm, SurvivorsNameTheKilledLocalPeer) {
  const bool group = std::string(GetParam()) == "auto";
  // The survivors ignore hvdrun's SIGTERM: each must fail on its own (and say so, below),
  // before the 30 s kill grace would end it silently.
  auto o = run({kHvdrun, "-np", "3", "--kill-grace", "30", kColl, "die-stay"}, 120,
               {{"HVDRUN_SHM_ALLREDUCE_BYTES", GetParam()}});
  ASSERT_FALSE(o.timed_out) << "a dead peer hung the job";
  EXPECT_NE(o.exit_code, 0);
  // Every survivor names rank 1: directly (it waited on rank 1 in the segment's barrier or
  // on its ring), or through the neighbour that gave up on rank 1 first and closed its
  // rings saying so.
  for (int r : {0, 2}) {
    std::string tag = "[" + std::to_string(r) + "]<stderr>:rank " + std::to_string(r) + ": hvd_allreduce";
    size_t at = o.err.find(tag);
    ASSERT_NE(at, std::string::npos) << o.err;
    std::string line = o.err.substr(at, o.err.find('\n', at) - at);
    EXPECT_NE(line.find(group ? "rank 1 (host localhost) exited (pid "
                              : "connection to rank 1 (host localhost) closed (the peer exited or failed)"),
              std::string::npos)
        << line;
  }
}
INSTANTIATE_TEST_SUITE_P(Paths, CollectivesLaunchFailuresShm, ::testing::Values("auto", "0"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

TEST(CollectivesLaunchMismatch, MismatchedCountsAreAClearError) {
  auto o = run({kHvdrun, "-np", "2", kColl, "mismatch"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_NE(o.exit_code, 0);
  // The engine finds it in negotiation and fails the call on both ranks, naming the
  // (blocking call's) tensor, the ranks and their values.
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(o.err.find("[" + std::to_string(r) + "]<stderr>:rank " + std::to_string(r) + ": hvd_allreduce(a, a, r == 1 ? 10 : 11, HVD_FLOAT32, HVD_OP_SUM) failed (7): rank " +
                         std::to_string(r) + ": allreduce 'hvdrun.allreduce': mismatched count: 11 on rank 0; 10 on rank 1"),
              std::string::npos)
        << o.err;
}

// Issue 30.6: a process forked after hvd_init inherits the runtime's memory and descriptors
// but not its threads. Its collectives, hvd_init and hvd_shutdown must leave the parent's
// rings and rendezvous session alone: each rank forks with an allreduce pending, the child
// calls every collective (each refused, naming the fork) or hvd_shutdown, and the parents'
// next allreduces are right and the job exits 0.
class CollectivesLaunchFork : public ::testing::TestWithParam<const char*> {};

TEST_P(CollectivesLaunchFork, AChildLeavesTheParentsJobAlone) {
  for (const char* shm : {"auto", "0"}) {
    auto o = run({kHvdrun, "-np", "2", kColl, "fork", GetParam()}, 120, {{"HVDRUN_SHM", shm}});
    ASSERT_FALSE(o.timed_out) << "HVDRUN_SHM=" << shm;
    EXPECT_EQ(o.exit_code, 0) << "HVDRUN_SHM=" << shm << "\n" << o.err;
    for (int r = 0; r < 2; ++r)
      EXPECT_NE(o.out.find("rank " + std::to_string(r) + " fork ok"), std::string::npos) << o.out << o.err;
  }
}
INSTANTIATE_TEST_SUITE_P(ChildCalls, CollectivesLaunchFork, ::testing::Values("collective", "shutdown"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });
