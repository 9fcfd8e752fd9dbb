// One host made ready for its ranks (launcher/host_preparation), the same on hvdrun's
// machine and in every agent: the program, then the budget, then the watchdog.
#include "launcher/host_preparation.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace hvdrun {
namespace {

// A budget of 100 descriptors, 10 in use: 20 local ranks need 64 + 40 + 20 of them.
ProcessBudget tight() {
  ProcessBudget have;
  have.nofile = 100;
  have.nofile_in_use = 10;
  return have;
}

HostNeed need_of(std::string program, long long ranks) {
  HostNeed need;
  need.program = std::move(program);
  need.path = "/usr/bin:/bin";
  need.budget.local_ranks = need.budget.all_ranks = ranks;
  return need;
}

// The order both hosts keep: a missing program is the first error, however far over its
// budget the job is too (it is what the user must fix either way).
TEST(HostPreparation, AMissingProgramIsReportedBeforeTheBudget) {
  auto r = check_host(need_of("no-such-program-hvdrun", 20), tight());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(r.error().message, "no-such-program-hvdrun: command not found");
}

TEST(HostPreparation, AFoundProgramOverItsBudgetIsRefusedByTheBudget) {
  auto r = check_host(need_of("sh", 20), tight());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kResourceLimit);
  EXPECT_EQ(r.error().message.rfind("20 ranks need about 134 open files in hvdrun, over its limit of 100", 0), 0u)
      << r.error().message;
  auto fits = check_host(need_of("sh", 2), tight());
  ASSERT_TRUE(fits.ok()) << fits.error().message;
  EXPECT_EQ(access(fits->c_str(), X_OK), 0) << *fits;
  EXPECT_EQ(fits->substr(fits->size() - 3), "/sh");
}

// hvdrun's machine with no rank of its own (every rank remote): nothing to resolve, the
// budget still counts (its rendezvous connections, the SSH sessions).
TEST(HostPreparation, NoProgramWhenNoRankRunsHere) {
  HostNeed need;
  need.budget.all_ranks = 10;  // 64 + 10 + 2 * 4 + 10 in use: under 100
  need.budget.remote_hosts = 2;
  auto r = check_host(need, tight());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, "");
  need.budget.all_ranks = 40;  // 64 + 40 + 8 + 10 in use: over
  EXPECT_EQ(check_host(need, tight()).error().kind, ErrorKind::kResourceLimit);
}

// This process's children, from /proc (the watchdog is one when it runs).
std::string children() {
  std::ifstream in("/proc/self/task/" + std::to_string(gettid()) + "/children");
  std::string kids;
  std::getline(in, kids);
  return kids;
}

TEST(HostPreparation, PrepareStartsTheWatchdogOnlyOnceTheChecksPass) {
  const std::string before = children();
  auto bad = prepare_host(need_of("no-such-program-hvdrun", 1), 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(children(), before) << "a watchdog was forked for a host that cannot run its ranks";

  auto good = prepare_host(need_of("sh", 1), 1);
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_EQ(good->exe.substr(good->exe.size() - 3), "/sh");
  pid_t pid = good->watchdog.pid();
  ASSERT_GT(pid, 0);
  EXPECT_NE(children().find(std::to_string(pid) + " "), std::string::npos) << children();
  good->watchdog.disarm();
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);  // a disarmed watchdog exits (0) at once
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
}

TEST(HostPreparation, PathComesFromTheWorkersEnvironment) {
  EXPECT_EQ(path_in({"HOME=/root", "PATH=/opt/bin:/bin", "PATHX=no"}), "/opt/bin:/bin");
  EXPECT_EQ(path_in({"HOME=/root", "MYPATH=/x"}), "");
}

}  // namespace
}  // namespace hvdrun
