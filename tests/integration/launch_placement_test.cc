// Ranks run where --dry-run says they will: each worker's CPUs as the kernel reports them
// (/proc/self/status Cpus_allowed_list, what sched_getaffinity returns) against the "bind"
// of the same rank in --dry-run's plan.
#include "launch_test_util.h"

using namespace testing_hvdrun;
using namespace launch_test;

namespace {

// rank -> the CPU list after "cpus " in --dry-run's "bind" ("" when it binds nothing).
std::map<int, std::string> planned_cpus(const std::vector<std::string>& args) {
  std::vector<std::string> dry = {"--dry-run"};
  dry.insert(dry.end(), args.begin(), args.end());
  dry.push_back("true");
  auto o = run(hvd(dry), 30);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  std::map<int, std::string> out;
  std::regex re("\"rank\":(\\d+),.*\"bind\":\"[^\"]*?(?:: cpus ([0-9,-]+))?\"");
  for (const auto& line : split_lines(o.out)) {
    std::smatch m;
    if (std::regex_search(line, m, re)) out[std::stoi(m[1].str())] = m[2].str();
  }
  return out;
}

// rank -> its Cpus_allowed_list, as the worker itself reads it.
std::map<int, std::string> worker_cpus(const std::vector<std::string>& args) {
  std::vector<std::string> a = args;
  a.insert(a.end(), {"sh", "-c", "grep Cpus_allowed_list /proc/self/status"});
  auto o = run(hvd(a), 30);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  std::map<int, std::string> out;
  std::regex re(R"(^\[(\d+)\]<stdout>:Cpus_allowed_list:\s*(\S+)$)");
  for (const auto& line : split_lines(o.out)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) out[std::stoi(m[1].str())] = m[2].str();
  }
  return out;
}

std::string own_cpus() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return line.substr(line.find_first_not_of(" \t", 18));
  return "";
}

}  // namespace

TEST(LaunchPlacement, EachRankRunsOnTheCpusDryRunShows) {
  if (run(hvd({"--dry-run", "-np", "2", "--bind-to", "core", "true"}), 30).exit_code != 0)
    GTEST_SKIP() << "fewer than two cores to bind to";
  for (const char* bind : {"core", "auto"}) {
    std::vector<std::string> args = {"-np", "2", "--bind-to", bind};
    auto plan = planned_cpus(args);
    auto ran = worker_cpus(args);
    ASSERT_EQ(plan.size(), 2u) << bind;
    ASSERT_EQ(ran.size(), 2u) << bind;
    for (int r = 0; r < 2; ++r) {
      ASSERT_FALSE(plan[r].empty()) << "--bind-to " << bind << ": rank " << r << " not bound in the plan";
      EXPECT_EQ(ran[r], plan[r]) << "--bind-to " << bind << ", rank " << r;
    }
    EXPECT_NE(ran[0], ran[1]) << "two ranks on one core";
  }
}

TEST(LaunchPlacement, NoneAndOversubscribedRanksKeepEveryCpu) {
  auto none = worker_cpus({"-np", "2", "--bind-to", "none"});
  ASSERT_EQ(none.size(), 2u);
  EXPECT_EQ(none[0], own_cpus());
  EXPECT_EQ(none[1], own_cpus());
  int over = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)) + 1;
  auto plan = planned_cpus({"-np", std::to_string(over)});
  EXPECT_EQ(plan[0], "");  // auto: nothing when the ranks outnumber the cores
  auto ran = worker_cpus({"-np", std::to_string(over)});
  EXPECT_EQ(ran[0], own_cpus());
}
