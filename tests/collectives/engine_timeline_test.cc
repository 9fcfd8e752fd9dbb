// The engine's timeline: every phase written and parsed back; a rank's file never opened
// over what is at its path.
#include "engine_test_util.h"

namespace hvdrun {
namespace {

using namespace engine_test;

TEST(Engine, TimelineIsParsedBackWithEveryPhase) {
  const int n = 2;
  std::string path = ::testing::TempDir() + "engine_timeline.json";
  std::vector<std::unique_ptr<Timeline>> tls;
  // (an earlier run's files: Timeline::open never overwrites)
  for (int r = 0; r < n; ++r) std::remove(Timeline::rank_path(path, r).c_str());
  for (int r = 0; r < n; ++r) tls.push_back(Timeline::open(path, r, "h" + std::to_string(r), true).value());
  {
    Job job(n, {}, {}, [&](EngineOptions& o, int r) { o.timeline = tls[r].get(); });
    auto res = on_all(n, [&](int r) -> std::string {
      auto ts = make_tensors(r, n, 6, 11);
      return run_step(*job.engines[r], ts, r, n, 2);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "");
  }
  tls.clear();
  for (int r = 0; r < n; ++r) {
    std::ifstream f(Timeline::rank_path(path, r));
    std::string line, all;
    std::getline(f, line);
    EXPECT_EQ(line, "[");
    int begins = 0, ends = 0, cycles = 0;
    std::set<std::string> phases;
    std::regex ev(R"re(^\{"name":"([^"]+)","ph":"([BEiM])".*"pid":(\d+).*\},$)re");
    while (std::getline(f, line)) {
      std::smatch m;
      ASSERT_TRUE(std::regex_match(line, m, ev)) << line;
      EXPECT_EQ(m[3], std::to_string(r));
      if (m[2] == "B") {
        ++begins;
        phases.insert(m[1]);
      }
      if (m[2] == "E") ++ends;
      if (m[1] == "CYCLE_START") ++cycles;
    }
    EXPECT_EQ(begins, ends) << "every phase is closed";
    EXPECT_GT(cycles, 0);
    EXPECT_TRUE(phases.count("QUEUE"));
    EXPECT_TRUE(phases.count("NEGOTIATE_allreduce"));
    EXPECT_TRUE(phases.count("ALLREDUCE"));
  }
}

// Issue 30.2: a rank creates its file, never opens what is there: a symbolic link (to a
// file of the user's) or an earlier job's file is an error naming it, and is left as it was
// (fopen "w" truncated the link's target).
TEST(Engine, TimelineNeverOverwritesWhatIsAtItsPath) {
  std::string dir = ::testing::TempDir() + "engine_timeline_links_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string path = dir + "/t.json";
  { std::ofstream(dir + "/victim") << "precious\n"; }
  std::filesystem::create_symlink(dir + "/victim", Timeline::rank_path(path, 0));
  { std::ofstream(Timeline::rank_path(path, 1)) << "an earlier job's\n"; }
  for (int r = 0; r < 2; ++r) {
    auto t = Timeline::open(path, r, "h", false);
    ASSERT_FALSE(t) << "rank " << r;
    EXPECT_NE(t.error().message.find(Timeline::rank_path(path, r) + " exists already"), std::string::npos)
        << t.error().message;
  }
  std::ifstream v(dir + "/victim");
  std::string line;
  std::getline(v, line);
  EXPECT_EQ(line, "precious");
  EXPECT_TRUE(std::filesystem::is_symlink(Timeline::rank_path(path, 0)));
  std::ifstream e(Timeline::rank_path(path, 1));
  std::getline(e, line);
  EXPECT_EQ(line, "an earlier job's");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hvdrun
