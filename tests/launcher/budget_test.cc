#include "launcher/budget.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <vector>

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
  ProcessBudget b = read_process_budget(1);
  EXPECT_GT(b.nofile_in_use, 2);
  EXPECT_GT(b.tasks_in_use, 0);
  EXPECT_GT(b.pid_max, 0);
}

// In a child that is not root (a user of its own), with RLIMIT_NPROC 24: processes are started until the
// kernel refuses one (its count then is the limit), one is ended (room for exactly one
// more), and read_process_budget's answer is checked on both sides of that edge. Its
// verdict is the kernel's own count, not a scan of the host's processes.
int nproc_edge_in_child() {
  rlimit lim{24, 24};
  if (setrlimit(RLIMIT_NPROC, &lim) != 0) return 10;
  // A user of its own (no other process counts against it, even in a run beside this one).
  uid_t uid = static_cast<uid_t>(200000 + getpid() % 100000);
  if (setresuid(uid, uid, uid) != 0) return 11;
  std::vector<pid_t> held;
  while (held.size() < 64) {
    pid_t p = fork();
    if (p == 0) {
      pause();
      _exit(0);
    }
    if (p < 0) break;
    held.push_back(p);
  }
  int rc = 0;
  if (held.empty() || held.size() >= 64) rc = 12;  // the limit was never reached
  if (!rc) {
    kill(held.back(), SIGKILL);
    waitpid(held.back(), nullptr, 0);
    held.pop_back();
    ProcessBudget one = read_process_budget(1), two = read_process_budget(2);
    if (one.nproc != 24 || one.nproc_in_use != 0) rc = 13;                  // room for one
    else if (two.nproc_in_use + 2 <= two.nproc) rc = 14;                    // but not two
    else if (check_process_budget(two, {1, 1, 0}).ok()) rc = 15;           // refused with the line
    else if (read_process_budget(1).nproc_in_use != 0) rc = 16;             // the limit restored
  }
  for (pid_t p : held) kill(p, SIGKILL);
  for (pid_t p : held) waitpid(p, nullptr, 0);
  return rc;
}

TEST(ProcessBudget, RoomUnderRlimitNprocIsTheKernelsCount) {
  if (getuid() != 0) GTEST_SKIP() << "needs root, to become a user of its own";
#if defined(__SANITIZE_THREAD__)
  // TSan starts a background thread in every forked child (2 tasks each, measured), unless
  // the limit refuses it: the children's tasks against RLIMIT_NPROC then depend on timing,
  // and the edge this test places is not where it counts.
  GTEST_SKIP() << "under TSan a forked child holds 1 or 2 tasks";
#endif
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(nproc_edge_in_child());
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "10-12: set-up failed; 13: room for one not seen; 14: room for two seen; "
                                   "15: not refused; 16: the limit not restored";
}

}  // namespace hvdrun
