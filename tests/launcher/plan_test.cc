#include "launcher/plan.h"
#include "launcher/exit_status.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/strings.h"
#include "launcher/launch_command.h"

namespace hvdrun {
namespace {

LaunchOptions opts(std::vector<std::string> command = {"true"}) {
  LaunchOptions o;
  o.command = std::move(command);
  return o;
}

const std::map<std::string, std::string> kAllocation = {
    {"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "n[1-2,5]"}, {"SLURM_TASKS_PER_NODE", "2(x2),1"}, {"PATH", "/bin"}};

std::vector<std::string> hosts_of(const JobPlan& p) {
  std::vector<std::string> h;
  for (const auto& r : p.ranks) h.push_back(r.host);
  return h;
}

TEST(Plan, InsideAnAllocationTheHostsAreSlurms) {
  auto p = make_plan(opts(), kAllocation);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->launcher, LauncherKind::kSlurm);
  EXPECT_EQ(p->slurm_job_id, "42");
  EXPECT_EQ(hosts_of(*p), (std::vector<std::string>{"n1", "n1", "n2", "n2", "n5"}));
  EXPECT_EQ(p->ranks[4].local_size, 1);
  // -np defaults to SLURM_NTASKS, and -np wins over it.
  auto env = kAllocation;
  env["SLURM_NTASKS"] = "3";
  p = make_plan(opts(), env);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(hosts_of(*p), (std::vector<std::string>{"n1", "n1", "n2"}));
  auto o = opts();
  o.np = 4;
  EXPECT_EQ(make_plan(o, env)->ranks.size(), 4u);
  o.np = 6;
  EXPECT_FALSE(make_plan(o, env).ok());  // 5 slots
}

TEST(Plan, HostsGivenWinOverTheAllocation) {
  auto o = opts();
  o.hosts = "a:2,b:1";
  auto p = make_plan(o, kAllocation);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->launcher, LauncherKind::kSsh);
  EXPECT_EQ(hosts_of(*p), (std::vector<std::string>{"a", "a", "b"}));
  // ... unless --launcher slurm: srun onto those nodes of the allocation.
  o.launcher = "slurm";
  p = make_plan(o, kAllocation);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->launcher, LauncherKind::kSlurm);
  EXPECT_EQ(hosts_of(*p), (std::vector<std::string>{"a", "a", "b"}));
}

TEST(Plan, LauncherChoices) {
  auto o = opts();
  o.np = 2;
  auto p = make_plan(o, {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->launcher, LauncherKind::kLocal);
  EXPECT_EQ(hosts_of(*p), (std::vector<std::string>{"localhost", "localhost"}));
  o.launcher = "local";  // inside an allocation, but asked to stay here
  p = make_plan(o, kAllocation);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->launcher, LauncherKind::kLocal);
  auto c = opts();
  c.hosts = "pod-0:1,pod-1:1";
  c.launch_command = "kubectl exec -i {host} --";
  p = make_plan(c, {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->launcher, LauncherKind::kCommand);
}

TEST(Plan, BadCombinationsAreOneLineUsageErrors) {
  struct Case {
    LaunchOptions o;
    std::map<std::string, std::string> env;
    const char* part;
  };
  auto with = [](auto f) {
    LaunchOptions o = opts();
    f(o);
    return o;
  };
  Case cases[] = {
      {opts(), {}, "-np is required when no hosts are given"},
      {with([](LaunchOptions& o) { o.launcher = "slurm"; }), {}, "--launcher slurm: not inside a Slurm allocation"},
      {with([](LaunchOptions& o) { o.launcher = "ssh"; o.np = 1; }), {}, "--launcher ssh needs the hosts"},
      {with([](LaunchOptions& o) { o.launcher = "command"; o.hosts = "a"; }), {}, "--launcher command needs --launch-command"},
      {with([](LaunchOptions& o) { o.launcher = "local"; o.hosts = "a"; }), {}, "--launcher local runs every rank on this machine"},
      {with([](LaunchOptions& o) { o.launcher = "ssh"; o.hosts = "a"; o.launch_command = "x {host}"; }), {},
       "--launch-command is for --launcher command, not ssh"},
      {opts(), {{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n[1-"}}, "SLURM_JOB_NODELIST: Slurm host list 'n[1-'"},
      {opts(), {{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_TASKS_PER_NODE", "2(x"}}, "SLURM_TASKS_PER_NODE '2(x'"},
  };
  for (const auto& c : cases) {
    auto p = make_plan(c.o, c.env);
    ASSERT_FALSE(p.ok()) << c.part;
    EXPECT_EQ(exit_code_for(p.error()), exit_code::kUsage);
    EXPECT_NE(p.error().message.find(c.part), std::string::npos) << p.error().message;
    EXPECT_EQ(p.error().message.find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace hvdrun
