// Command lines that start `hvdrun --agent` on a host (launcher/launch_command, pure).
#include "launcher/launch_command.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/strings.h"

namespace hvdrun {
namespace {

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
