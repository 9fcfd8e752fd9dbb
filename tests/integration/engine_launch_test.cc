// The engine's C API across real processes started by hvdrun: async names in any order,
// every kind, join, hvd_init after hvd_shutdown, a peer killed with handles pending, the
// stall warning and stall shutdown printed by hvdrun, and the merged timeline.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "process.h"

using namespace testing_hvdrun;

namespace {
const std::string kHvdrun = HVDRUN_BIN;
const std::string kEngine = ENGINE_WORKER_BIN;

class EngineLaunch : public ::testing::TestWithParam<int> {};

TEST_P(EngineLaunch, AsyncNamesInAnyOrderEveryKindAndJoin) {
  const int n = GetParam();
  auto o = run({kHvdrun, "-np", std::to_string(n), kEngine, "async"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  for (int r = 0; r < n; ++r)
    EXPECT_NE(o.out.find("[" + std::to_string(r) + "]<stdout>:rank " + std::to_string(r) + " engine ok"),
              std::string::npos)
        << o.out << o.err;
}
INSTANTIATE_TEST_SUITE_P(Sizes, EngineLaunch, ::testing::Values(1, 2, 3, 4));

TEST(EngineLaunchArguments, OverflowingCountsAndOverlappingBuffersAreRefused) {
  // Issue 30.8: counts whose byte count wraps or passes the address space, splits whose
  // sum wraps, partly overlapping buffers: every entry point, sync and async, refuses them
  // at once naming the value (before: wrong results, "success", segfaults).
  for (int n : {1, 2, 3}) {
    auto o = run({kHvdrun, "-np", std::to_string(n), kEngine, "overflow"}, 120);
    ASSERT_FALSE(o.timed_out);
    EXPECT_EQ(o.exit_code, 0) << o.err;
    for (int r = 0; r < n; ++r)
      EXPECT_NE(o.out.find("rank " + std::to_string(r) + " overflow ok"), std::string::npos) << o.out << o.err;
  }
}

TEST(EngineLaunchLifecycle, InitAfterShutdownWorksInOneProcess) {
  // Issue 16.13: hvd_init after hvd_shutdown registers again with the rendezvous.
  auto o = run({kHvdrun, "-np", "3", kEngine, "reinit"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(o.out.find("rank " + std::to_string(r) + " reinit ok"), std::string::npos) << o.out << o.err;
  EXPECT_EQ(o.err.find("already registered"), std::string::npos) << o.err;
}

TEST(EngineLaunchLifecycle, PeerKilledWithHandlesPendingEndsTheJobFast) {
  auto o = run({kHvdrun, "-np", "3", "--kill-grace", "2", kEngine, "die"}, 120);
  ASSERT_FALSE(o.timed_out) << "a dead peer hung the job";
  EXPECT_EQ(o.exit_code, 137) << o.err;
  EXPECT_NE(o.err.find("rank 1 (host localhost) was killed by signal 9"), std::string::npos) << o.err;
}

TEST(EngineLaunchLifecycle, ARankWithOneCollectiveFewerIsBlamedNotTheRanksLeftWaiting) {
  // Issue 16.9: rank 1 skips "f2", calls hvd_shutdown and exits 0; ranks 0 and 2 fail on
  // "f2" and exit 1. The report names rank 1, whichever of the others fails first, and
  // whether its hvd_shutdown reached them while they waited on "f2" or (late) before they
  // submitted it.
  const std::string fewer = " (rank 1 submitted fewer collectives than this rank)";
  for (bool late : {false, true})
    for (int n : {2, 3}) {
      std::vector<std::string> argv{kHvdrun, "-np", std::to_string(n), kEngine, "fewer"};
      if (late) argv.push_back("late");
      auto o = run(argv, 120);
      ASSERT_FALSE(o.timed_out);
      EXPECT_NE(o.exit_code, 0) << o.err;
      if (late)
        EXPECT_NE(o.err.find("rank 1 called hvd_shutdown before this rank submitted 'f2'" + fewer), std::string::npos)
            << o.err;
      else
        EXPECT_TRUE(o.err.find("rank 1 called hvd_shutdown while this rank still waited on it in 'f2'" + fewer) !=
                        std::string::npos ||
                    o.err.find("rank 1 called hvd_shutdown before this rank submitted 'f2'" + fewer) != std::string::npos)
            << o.err;
      // hvdrun's own lines name rank 1 as the cause, never an innocent rank's exit.
      for (const auto& line : split_lines(o.err)) {
        if (line.rfind("hvdrun: ", 0) == 0) {
          EXPECT_NE(line.find("rank 1 called hvd_shutdown"), std::string::npos) << o.err;
        }
      }
    }
}

TEST(EngineLaunchStall, WarningNamesTheTensorAndTheMissingRankOnce) {
  auto o = run({kHvdrun, "-np", "3", kEngine, "stall"}, 120, {{"HVDRUN_STALL_CHECK_TIME_SECONDS", "1"}});
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  const std::string line = "rank 1 (host localhost) has not submitted: late.tensor";
  auto at = o.err.find(line);
  ASSERT_NE(at, std::string::npos) << o.err;
  EXPECT_EQ(o.err.find(line, at + 1), std::string::npos) << "one warning, not one per check: " << o.err;
  EXPECT_NE(o.err.find("hvdrun: warning: collectives stalled for more than 1 s"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("rank 0 (host localhost) has not"), std::string::npos) << o.err;
}

TEST(EngineLaunchStall, WarningSaysTheWorkersTimeSetWithX) {
  // Issue 30.5: the time came from hvdrun's own environment (60 s), not the workers' -x.
  auto o = run({kHvdrun, "-np", "3", "-x", "HVDRUN_STALL_CHECK_TIME_SECONDS=1", kEngine, "stall"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.err.find("rank 1 (host localhost) has not submitted: late.tensor"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("hvdrun: warning: collectives stalled for more than 1 s (HVDRUN_STALL_CHECK_TIME_SECONDS)"),
            std::string::npos)
      << o.err;
}

TEST(EngineLaunchStall, HoroVodSpellingAndStallShutdownEndTheJobWithTheList) {
  auto o = run({kHvdrun, "-np", "2", kEngine, "stallforever"}, 120,
               {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "1"}, {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "2"}});
  ASSERT_FALSE(o.timed_out);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("stalled collectives past HVDRUN_STALL_SHUTDOWN_TIME_SECONDS"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("rank 1 (host localhost) has not submitted: late.tensor"), std::string::npos) << o.err;
}

TEST(EngineLaunchThreads, BlockingCallsFromSeveralThreadsPairInOrderWithoutAHang) {
  // Issue 30.7: 4 threads of blocking calls per rank gave wrong results, then hung. A hang
  // now ends the job within seconds (the stall shutdown), not the test's deadline.
  for (int n : {2, 3}) {
    auto o = run({kHvdrun, "-np", std::to_string(n), kEngine, "threads"}, 120,
                 {{"HVDRUN_STALL_CHECK_TIME_SECONDS", "2"}, {"HVDRUN_STALL_SHUTDOWN_TIME_SECONDS", "5"}});
    ASSERT_FALSE(o.timed_out);
    EXPECT_EQ(o.exit_code, 0) << o.err;
    for (int r = 0; r < n; ++r)
      EXPECT_NE(o.out.find("rank " + std::to_string(r) + " threads ok"), std::string::npos) << o.out << o.err;
  }
}

// Parses the merged trace: a JSON array; every rank a process row; every B closed by an E
// per (pid, tid); the phases of the engine present.
void check_trace(const std::string& path, int n, bool complete) {
  std::ifstream f(path);
  ASSERT_TRUE(f) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  ASSERT_TRUE(j.is_array()) << ss.str().substr(0, 500);
  std::set<int> pids;
  std::set<std::string> phases;
  std::map<std::pair<int, int>, int> depth;
  int cycles = 0;
  for (auto& e : j) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    std::string ph = e["ph"];
    int pid = e["pid"];
    pids.insert(pid);
    if (ph == "B") {
      phases.insert(e["name"].get<std::string>());
      ++depth[{pid, e.value("tid", 0)}];
    } else if (ph == "E") {
      --depth[{pid, e.value("tid", 0)}];
    } else if (ph == "i" && e["name"] == "CYCLE_START") {
      ++cycles;
    }
  }
  for (int r = 0; r < n; ++r) EXPECT_TRUE(pids.count(r)) << "rank " << r << " has no row";
  EXPECT_TRUE(phases.count("QUEUE") && phases.count("NEGOTIATE_allreduce") && phases.count("ALLREDUCE"));
  EXPECT_TRUE(phases.count("MEMCPY_IN_FUSION_BUFFER") && phases.count("MEMCPY_OUT_FUSION_BUFFER"));
  EXPECT_GT(cycles, 0);
  if (complete) {
    for (auto& [k, d] : depth) EXPECT_EQ(d, 0) << "pid " << k.first << " tid " << k.second;
  }
}

TEST(EngineLaunchTimeline, MergedChromeTraceWithCycleMarks) {
  std::string path = ::testing::TempDir() + "hvdrun_timeline_" + std::to_string(getpid()) + ".json";
  auto o = run({kHvdrun, "-np", "3", "--timeline-filename", path, "--timeline-mark-cycles", kEngine, "steps", "3"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  check_trace(path, 3, true);
  for (int r = 0; r < 3; ++r) EXPECT_NE(access((path + ".rank" + std::to_string(r)).c_str(), F_OK), 0) << "merged away";
  std::remove(path.c_str());
}

TEST(EngineLaunchTimeline, AJobKilledMidRunStillLeavesALoadableFile) {
  std::string path = ::testing::TempDir() + "hvdrun_timeline_killed_" + std::to_string(getpid()) + ".json";
  auto o = run({kHvdrun, "-np", "2", "--kill-grace", "1", "--timeline-mark-cycles", kEngine, "steps", "50", "2"}, 120,
               {{"HOROVOD_TIMELINE", path}});
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 137) << o.err;
  check_trace(path, 2, false);
  std::remove(path.c_str());
}

// The timeline set for the workers alone (-x, as with mpirun -x HOROVOD_TIMELINE): hvdrun
// checked and merged only its own environment's, so the ranks' files stayed unmerged and the
// same command run again failed in hvd_init ("exists already", exit 12); and
// --timeline-mark-cycles said it needed a timeline (exit 2).
TEST(EngineLaunchTimeline, SetWithXItIsMergedAndTheSameCommandRunsAgain) {
  std::string dir = make_temp_dir();
  for (const char* var : {"HVDRUN_TIMELINE", "HOROVOD_TIMELINE"}) {
    std::string path = dir + "/" + var + ".json";
    for (int round = 0; round < 2; ++round) {
      auto o = run({kHvdrun, "-np", "2", "-x", std::string(var) + "=" + path, "--timeline-mark-cycles", kEngine,
                    "steps", "2"},
                   120);
      ASSERT_FALSE(o.timed_out);
      ASSERT_EQ(o.exit_code, 0) << var << " round " << round << ": " << o.err;
      check_trace(path, 2, true);
      for (int r = 0; r < 2; ++r)
        EXPECT_NE(access((path + ".rank" + std::to_string(r)).c_str(), F_OK), 0) << var << ": merged away";
    }
  }
  std::filesystem::remove_all(dir);
}

// Issue 30.2: a symbolic link (to a file of the user's) or an earlier job's file at a rank's
// path is refused before anything starts, naming it, and nothing is overwritten (rank 0
// truncated the link's target, exit 0, no word). A directory as the path (30.4) likewise.
TEST(EngineLaunchTimeline, WhatIsAtTheTimelinesPathsIsRefusedBeforeTheJobAndLeftAlone) {
  std::string dir = make_temp_dir();
  std::string path = dir + "/t.json";
  { std::ofstream(dir + "/victim") << "precious\n"; }
  ASSERT_EQ(symlink((dir + "/victim").c_str(), (path + ".rank0").c_str()), 0);
  auto o = run({kHvdrun, "-np", "2", "--timeline-filename", path, kEngine, "steps", "1"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("hvdrun: --timeline-filename '" + path + "': " + path +
                       ".rank0 is a symbolic link: hvdrun neither overwrites nor merges it"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(o.out.find("steps done"), std::string::npos) << "the job ran: " << o.out;
  EXPECT_EQ(read_file(dir + "/victim"), "precious\n");
  // An earlier job's file, through HOROVOD_TIMELINE.
  std::remove((path + ".rank0").c_str());
  { std::ofstream(path + ".rank1") << "an earlier job's\n"; }
  o = run({kHvdrun, "-np", "2", kEngine, "steps", "1"}, 120, {{"HOROVOD_TIMELINE", path}});
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("hvdrun: HVDRUN_TIMELINE '" + path + "': " + path + ".rank1 exists already"), std::string::npos)
      << o.err;
  EXPECT_EQ(read_file(path + ".rank1"), "an earlier job's\n");
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "nothing was merged";
  // A directory.
  o = run({kHvdrun, "-np", "1", "--timeline-filename", dir, kEngine, "steps", "1"}, 120);
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("hvdrun: --timeline-filename '" + dir + "': is a directory"), std::string::npos) << o.err;
  std::filesystem::remove_all(dir);
}

// hvd_init after hvd_shutdown goes on writing the rank's file (it exists by then: it is
// this process's): the merged trace holds every round's allreduce.
TEST(EngineLaunchTimeline, InitAfterShutdownWritesOnInTheSameFile) {
  std::string dir = make_temp_dir();
  std::string path = dir + "/t.json";
  auto o = run({kHvdrun, "-np", "2", "--timeline-filename", path, kEngine, "reinit"}, 120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  auto j = nlohmann::json::parse(read_file(path), nullptr, false);
  ASSERT_TRUE(j.is_array()) << read_file(path);
  int allreduces = 0;
  for (auto& e : j) allreduces += e["pid"] == 0 && e["ph"] == "B" && e["name"] == "ALLREDUCE";
  EXPECT_EQ(allreduces, 3) << "one per round";
  std::filesystem::remove_all(dir);
}

TEST(EngineLaunchTimeline, MarkCyclesWithoutAFileIsAUsageError) {
  auto o = run({kHvdrun, "-np", "1", "--timeline-mark-cycles", kEngine, "steps", "1"}, 60);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("--timeline-mark-cycles needs --timeline-filename FILE"), std::string::npos) << o.err;
}

}  // namespace
