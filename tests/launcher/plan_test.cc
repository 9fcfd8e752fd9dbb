#include "launcher/plan.h"

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
    EXPECT_EQ(p.error().code, exit_code::kUsage);
    EXPECT_NE(p.error().message.find(c.part), std::string::npos) << p.error().message;
    EXPECT_EQ(p.error().message.find('\n'), std::string::npos);
  }
}

TEST(LaunchCommand, SshCommandPutsDashDashBeforeTheHost) {
  auto a = ssh_command_argv("ssh -o 'ProxyJump=gw 1'", 2222, "/k", "-oProxyCommand=x", "/opt/my dir/hvdrun", 30);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, (std::vector<std::string>{"ssh", "-o", "ProxyJump=gw 1", "-p", "2222", "-i", "/k", "--",
                                          "-oProxyCommand=x", "exec '/opt/my dir/hvdrun' --agent --start-timeout=30"}));
  EXPECT_FALSE(ssh_command_argv("ssh $(evil)", 0, "", "h", "/h", 30).ok());
  EXPECT_FALSE(ssh_command_argv("", 0, "", "h", "/h", 30).ok());
}

TEST(LaunchCommand, TemplatePlacesTheHostAndTheAgentsWords) {
  auto a = template_argv("kubectl exec -i {host} --", "worker-1", "/usr/bin/hvdrun", 2.5);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, (std::vector<std::string>{"kubectl", "exec", "-i", "worker-1", "--", "/usr/bin/hvdrun", "--agent", "--start-timeout=2.5"}));
  a = template_argv("docker exec -i job-{host}", "w1", "hvdrun", 2.5);
  EXPECT_EQ(*a, (std::vector<std::string>{"docker", "exec", "-i", "job-w1", "hvdrun", "--agent", "--start-timeout=2.5"}));
  // No {host}: `-- HOST` appended, as for --ssh-command.
  a = template_argv("rsh-like -x", "-n1", "hvdrun", 2.5);
  EXPECT_EQ(*a, (std::vector<std::string>{"rsh-like", "-x", "--", "-n1", "hvdrun", "--agent", "--start-timeout=2.5"}));
  auto bad = template_argv("kubectl exec `x` {host}", "h", "hvdrun", 2.5);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("--launch-command 'kubectl exec `x` {host}': '`' outside quotes"), std::string::npos)
      << bad.error().message;
}

// One rule for the template's words: split as a shell splits them (blanks, quotes,
// backslashes), nothing expanded. An undefined $VAR was refused while $HOME and a glob
// were expanded (the glob against hvdrun's working directory).
TEST(LaunchCommand, TemplateWordsAreSplitLikeAShellButNeverExpanded) {
  std::string dir = ::testing::TempDir() + "/hvdrun_glob_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/a.yaml") << "x";
  auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  ::setenv("HVDRUN_TEST_DEFINED", "defined", 1);
  ::unsetenv("HVDRUN_TEST_UNDEFINED");
  auto a = template_argv("launch -f *.yaml --ns $HVDRUN_TEST_UNDEFINED --home ${HVDRUN_TEST_DEFINED} ~ {host}", "h1",
                         "hvdrun", 2.5);
  std::filesystem::current_path(cwd);
  std::filesystem::remove_all(dir);
  ::unsetenv("HVDRUN_TEST_DEFINED");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(*a, (std::vector<std::string>{"launch", "-f", "*.yaml", "--ns", "$HVDRUN_TEST_UNDEFINED", "--home",
                                          "${HVDRUN_TEST_DEFINED}", "~", "h1", "hvdrun", "--agent",
                                          "--start-timeout=2.5"}));
  // Quotes and backslashes as in a shell: single quotes keep everything; in double quotes a
  // backslash escapes only $ ` " \ and a newline.
  a = template_argv(R"(sh -c "exec \"\$@\"" 'it''s {host}' a\ b "x\y" "" {host})", "h2", "hvdrun", 1);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(*a, (std::vector<std::string>{"sh", "-c", "exec \"$@\"", "its h2", "a b", "x\\y", "", "h2", "hvdrun",
                                          "--agent", "--start-timeout=1"}));
  // Lines continued, and the newline that ends the template, as in a shell.
  auto c = split_command_line("ssh \\\n  -x a\\\nb \"c\\\nd\"\n", "--ssh-command");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(*c, (std::vector<std::string>{"ssh", "-x", "ab", "cd"}));
  // Shell syntax that only a shell could act on is refused, naming it.
  for (const char* t : {"ssh {host} | tee", "ssh {host}; x", "a $(b) {host}", "a > f", "a 'b", "a \"b", "a b\\", "a\nb"}) {
    auto bad = split_command_line(t, "--launch-command");
    ASSERT_FALSE(bad.ok()) << t;
    EXPECT_EQ(bad.error().kind, ErrorKind::kUsage);
    EXPECT_EQ(bad.error().message.rfind("--launch-command '" + printable(t, 200, true) + "': ", 0), 0u) << bad.error().message;
  }
  EXPECT_FALSE(split_command_line("  ", "--ssh-command").ok());
}

TEST(LaunchCommand, SrunStartsOneAgentPerNode) {
  auto a = srun_argv({"n1", "n2", "n5"}, "/opt/hvdrun", 45);
  std::string line;
  for (const auto& w : a) line += w + " ";
  EXPECT_EQ(line,
            "srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --kill-on-bad-exit=1 --nodelist=n1,n2,n5 --mpi=none "
            "--cpu-bind=none --input=none --label --job-name=hvdrun-agents -- /opt/hvdrun --agent --start-timeout=45 ");
}

}  // namespace
}  // namespace hvdrun
