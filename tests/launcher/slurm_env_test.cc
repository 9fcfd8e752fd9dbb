#include "launcher/slurm_env.h"

#include <gtest/gtest.h>

#include "common/strings.h"

namespace hvdrun::slurm {
namespace {

using V = std::vector<std::string>;

// Expected values are what Slurm 22.05's `scontrol show hostnames` prints for each list
// (tests/slurm also compares against scontrol itself when Slurm is installed).
TEST(SlurmHostlist, AsScontrolShowHostnames) {
  struct Case {
    const char* list;
    V hosts;
  } cases[] = {
      {"n[1-2,5]", {"n1", "n2", "n5"}},
      {"x[01-02]", {"x01", "x02"}},
      {"n[08-11]", {"n08", "n09", "n10", "n11"}},
      {"n[8-11]", {"n8", "n9", "n10", "n11"}},
      {"n[009-011]", {"n009", "n010", "n011"}},
      {"n[01-3]", {"n01", "n02", "n03"}},
      {"n[1-010]", {"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"}},
      {"a[1-2]b[3-4]", {"a1b3", "a1b4", "a2b3", "a2b4"}},
      {"rack[0-1]_blade[00-01]", {"rack0_blade00", "rack0_blade01", "rack1_blade00", "rack1_blade01"}},
      {"n[1-2]-x[1-2]", {"n1-x1", "n1-x2", "n2-x1", "n2-x2"}},
      {"n-[1-2]", {"n-1", "n-2"}},
      {"tux[1-2],tux[5]", {"tux1", "tux2", "tux5"}},
      {"a,b c", {"a", "b", "c"}},
      {"n[1-2],n[1-2]", {"n1", "n2", "n1", "n2"}},
      {"gpu-a[01-02],cpu7,lx[10-11,20]", {"gpu-a01", "gpu-a02", "cpu7", "lx10", "lx11", "lx20"}},
      {"node1", {"node1"}},
  };
  for (const auto& c : cases) {
    auto h = expand_hostlist(c.list);
    ASSERT_TRUE(h.ok()) << c.list << ": " << h.error().message;
    EXPECT_EQ(*h, c.hosts) << c.list;
  }
}

TEST(SlurmHostlist, BadListsSayWhy) {
  struct Case {
    const char* list;
    const char* part;
  } cases[] = {
      {"n[3-1]", "range '3-1' goes down"},
      {"n[]", "'' is not a number"},
      {"n[1-2", "'[' without ']'"},
      {"n1-2]", "']' without '['"},
      {"n[a-b]", "'a-b' is not a number"},
      {"n[1-2[3]]", "'[' inside brackets"},
      {"", "no hosts"},
      {"n;rm", "unexpected character ';'"},
      {"n[1-99999999]", "more than"},
      {"a[1-1000]b[1-1000]c[1-1000]", "more than"},
      {"n[3\r-1]", "'3\\x0d-1' is not a number"},  // a control character is shown, not written
  };
  for (const auto& c : cases) {
    auto h = expand_hostlist(c.list, 100000);
    ASSERT_FALSE(h.ok()) << c.list;
    EXPECT_NE(h.error().message.find(c.part), std::string::npos) << h.error().message;
    EXPECT_NE(h.error().message.find("Slurm host list '" + hvdrun::printable(c.list) + "'"), std::string::npos);
  }
}

TEST(SlurmTasksPerNode, Runs) {
  EXPECT_EQ(*parse_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(*parse_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_EQ(*parse_tasks_per_node("1,4(x2),8"), (std::vector<int>{1, 4, 4, 8}));
  for (const char* bad : {"", "x", "2(x)", "2(3)", "0", "2(x0)", "2(x3", "-1", "2,,1"}) {
    auto t = parse_tasks_per_node(bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_NE(t.error().message.find("SLURM_TASKS_PER_NODE '" + std::string(bad) + "': expected counts like '2(x3),1'"),
              std::string::npos);
  }
  auto many = parse_tasks_per_node("1,13721111");
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.error().message.find("13721111 tasks on one node; at most 1048576"), std::string::npos)
      << many.error().message;
}

TEST(SlurmAllocation, HostsAndSlotsFromTheEnvironment) {
  std::map<std::string, std::string> env = {
      {"SLURM_JOB_ID", "17"}, {"SLURM_JOB_NODELIST", "n[1-3],x01"}, {"SLURM_TASKS_PER_NODE", "2(x3),1"}};
  auto h = allocation_hosts(env);
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_EQ(*h, (std::vector<HostSlots>{{"n1", 2}, {"n2", 2}, {"n3", 2}, {"x01", 1}}));
  env.erase("SLURM_TASKS_PER_NODE");
  EXPECT_EQ(*allocation_hosts(env), (std::vector<HostSlots>{{"n1", 1}, {"n2", 1}, {"n3", 1}, {"x01", 1}}));
  env["SLURM_TASKS_PER_NODE"] = "2(x2)";
  auto mismatch = allocation_hosts(env);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.error().message.find("gives 2 node(s), SLURM_JOB_NODELIST 'n[1-3],x01' names 4"), std::string::npos);
  env["SLURM_JOB_NODELIST"] = "n[2-1]";
  EXPECT_NE(allocation_hosts(env).error().message.find("SLURM_JOB_NODELIST: Slurm host list 'n[2-1]'"), std::string::npos);
  // Inside a step the layout is the step's: refused, saying why.
  auto step = allocation_hosts({{"SLURM_JOB_ID", "17"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "n[1-2]"},
                                {"SLURM_TASKS_PER_NODE", "1"}});
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.error().message.find("hvdrun runs inside Slurm step 17.0, whose SLURM_TASKS_PER_NODE describes that step"),
            std::string::npos)
      << step.error().message;
  auto none = allocation_hosts({{"SLURM_JOB_ID", "17"}});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("SLURM_JOB_NODELIST is not set"), std::string::npos);
  EXPECT_EQ(*allocation_ntasks({{"SLURM_NTASKS", "6"}}), 6);
  EXPECT_EQ(*allocation_ntasks({{"SLURM_NPROCS", "3"}}), 3);
  EXPECT_EQ(*allocation_ntasks({}), 0);
  EXPECT_FALSE(allocation_ntasks({{"SLURM_NTASKS", "many"}}).ok());
}

}  // namespace
}  // namespace hvdrun::slurm
