#include "launcher/budget.h"

#include <gtest/gtest.h>

namespace hvdrun {

// Issue 16.6: -np 100000 started ~10,000 workers before EMFILE; the budget is checked first.
TEST(ProcessBudget, DescriptorsNamedWithTheValueNeeded) {
  ProcessBudget have;
  have.nofile = 20000;
  have.nofile_in_use = 10;
  BudgetNeed need{100000, 100000, 0};
  auto st = check_process_budget(have, need);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().kind, ErrorKind::kResourceLimit);  // the kind travels with it (hvdrun and agents alike)
  EXPECT_EQ(st.error().message,
            "100000 ranks need about " + std::to_string(files_needed(need) + 10) +
                " open files in hvdrun, over its limit of 20000 (RLIMIT_NOFILE, 'ulimit -n'); raise the limit or "
                "start fewer ranks");
  EXPECT_EQ(files_needed(need), 64 + 3 * 100000);
  EXPECT_TRUE(check_process_budget(have, {1000, 1000, 0}).ok());
  // Remote ranks cost hvdrun one rendezvous connection each, not pipes.
  EXPECT_EQ(files_needed({0, 5000, 10}), 64 + 5000 + 40);
  auto remote = check_process_budget(have, {4, 30000, 100});
  ASSERT_FALSE(remote.ok());
  EXPECT_EQ(remote.error().message.rfind("30000 ranks (4 on this host) need about", 0), 0u) << remote.error().message;
  have.nofile = -1;  // unlimited
  EXPECT_TRUE(check_process_budget(have, {4, 30000, 100}).ok());
}

TEST(ProcessBudget, ProcessesAgainstRlimitNprocAndPidMax) {
  ProcessBudget have;
  have.nproc = 4096;
  have.nproc_in_use = 4000;
  auto st = check_process_budget(have, {200, 200, 0});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message,
            "200 ranks need 216 more processes, but this user may start only 96 more (RLIMIT_NPROC 4096, 'ulimit -u', "
            "4000 in use); raise the limit or start fewer ranks");
  EXPECT_TRUE(check_process_budget(have, {80, 80, 0}).ok());
  ProcessBudget sys;
  sys.pid_max = 32768;
  sys.tasks_in_use = 700;
  auto p = check_process_budget(sys, {100000, 100000, 0});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().message,
            "100000 ranks need 100016 more processes, but the system has room for only 32068 more "
            "(kernel.pid_max / kernel.threads-max 32768, 700 in use); start fewer ranks");
  EXPECT_TRUE(check_process_budget(sys, {1000, 1000, 0}).ok());
}

TEST(ProcessBudget, ReadsThisMachine) {
  ProcessBudget b = read_process_budget();
  EXPECT_GT(b.nofile_in_use, 2);
  EXPECT_GT(b.tasks_in_use, 0);
  EXPECT_GT(b.pid_max, 0);
}

}  // namespace hvdrun
