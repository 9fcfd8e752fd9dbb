#include "launcher/options.h"
#include "launcher/exit_status.h"

#include <gtest/gtest.h>

namespace hvdrun {

Result<ParsedCommandLine> parse(std::vector<std::string> args) { return parse_command_line(args); }

TEST(Options, HorovodStyleCommandLine) {
  auto r = parse({"-np", "8", "-H", "a:4,b:4", "-p", "2222", "-i", "/k", "--start-timeout", "12", "-x", "A=1", "-x",
                  "B", "--output-filename", "/tmp/o", "--verbose", "python", "train.py", "-np", "3", "--lr=1"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& o = r->options;
  EXPECT_EQ(o.np, 8);
  EXPECT_EQ(o.hosts, "a:4,b:4");
  EXPECT_EQ(o.ssh_port, 2222);
  EXPECT_EQ(o.ssh_identity_file, "/k");
  EXPECT_DOUBLE_EQ(o.start_timeout, 12);
  EXPECT_EQ(o.env, (std::vector<std::string>{"A=1", "B"}));
  EXPECT_EQ(o.output_dir, "/tmp/o");
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(o.command, (std::vector<std::string>{"python", "train.py", "-np", "3", "--lr=1"}));
}

TEST(Options, HierarchicalFlagsSetTheWorkersVariablesAheadOfDashX) {
  auto r = parse({"-np", "4", "--hierarchical-allreduce", "--hierarchical-allgather", "-x",
                  "HVDRUN_HIERARCHICAL_ALLGATHER=0", "prog"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->options.env,
            (std::vector<std::string>{"HVDRUN_HIERARCHICAL_ALLREDUCE=1", "HOROVOD_HIERARCHICAL_ALLREDUCE=1",
                                      "HVDRUN_HIERARCHICAL_ALLGATHER=1", "HOROVOD_HIERARCHICAL_ALLGATHER=1",
                                      "HVDRUN_HIERARCHICAL_ALLGATHER=0"}));
  r = parse({"-np", "4", "prog"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->options.env.empty());
}

TEST(Options, HorovodCompatIsOffByDefault) {
  auto r = parse({"-np", "2", "python3", "train.py"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->options.horovod_compat);
  r = parse({"-np", "2", "--horovod-compat", "python3", "train.py", "--horovod-compat"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->options.horovod_compat);
  EXPECT_EQ(r->options.command, (std::vector<std::string>{"python3", "train.py", "--horovod-compat"}));
}

TEST(Options, DoubleDashAndDefaults) {
  auto r = parse({"-np", "2", "--", "-weird", "x"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->options.command, (std::vector<std::string>{"-weird", "x"}));
  EXPECT_DOUBLE_EQ(r->options.start_timeout, 30);
  EXPECT_DOUBLE_EQ(r->options.kill_grace, 5);
  r = parse({"-H", "a:2", "true"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->options.np, 0);
}

TEST(Options, SshOptions) {
  auto r = parse({"-np", "2", "-H", "a,b", "--ssh-host-key-checking", "yes", "--ssh-command", "ssh -J gw",
                  "--remote-hvdrun", "/opt/hvdrun/bin/hvdrun", "true"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->options.ssh_host_key_checking, "yes");
  EXPECT_EQ(r->options.ssh_command, "ssh -J gw");
  EXPECT_EQ(r->options.remote_hvdrun, "/opt/hvdrun/bin/hvdrun");
  r = parse({"-np", "1", "true"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->options.ssh_host_key_checking, "accept-new");
}

// An empty template fell back to SSH without a word; an empty --ssh-command to libssh.
// Both are usage errors (exit 2), as is a template that cannot be split, before anything starts.
TEST(Options, EmptyOrUnsplittableLaunchCommandIsRefused) {
  struct Case {
    const char* option;
    const char* value;
    const char* part;
  };
  Case cases[] = {
      {"--launch-command", "", "--launch-command '': expected a command template, e.g. 'kubectl exec -i {host} --'"},
      {"--launch-command", "  ", "--launch-command '  ': expected a command template, e.g. 'kubectl exec -i {host} --'"},
      {"--ssh-command", "", "--ssh-command '': expected a client command, e.g. 'ssh -o ProxyJump=gw'"},
      {"--launch-command", "kubectl exec 'x {host}", "--launch-command 'kubectl exec 'x {host}': "},
      {"--ssh-command", "ssh | tee", "--ssh-command 'ssh | tee': "},
  };
  for (const auto& c : cases) {
    auto r = parse({"-np", "2", "-H", "a,b", c.option, c.value, "true"});
    ASSERT_FALSE(r.ok()) << c.option << " '" << c.value << "' was taken";
    EXPECT_EQ(r.error().kind, ErrorKind::kUsage);
    EXPECT_NE(r.error().message.find(c.part), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
  }
  auto r = parse({"-np", "2", "-H", "a,b", "--launch-command", "kubectl exec -i {host} --", "true"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->options.launch_command, "kubectl exec -i {host} --");
}

TEST(Options, NcclDebugLevelIsNcclsSpelling) {
  auto r = parse({"-np", "1", "--nccl-debug", "info", "true"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->options.nccl_debug, "INFO");
}

TEST(Options, HorovodFlagAndEnvironment) {
  auto r = parse({"-np", "2", "python3", "train.py", "--horovod"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->options.horovod);  // the command's own flag
  r = parse({"--horovod", "-np", "2", "python3", "train.py"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->options.horovod);
  setenv("HVDRUN_HOROVOD", "1", 1);
  r = parse({"-np", "2", "python3", "train.py"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->options.horovod);
  setenv("HVDRUN_HOROVOD", "0", 1);
  r = parse({"-np", "2", "python3", "train.py"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->options.horovod);
  setenv("HVDRUN_HOROVOD", "yes please", 1);
  r = parse({"-np", "2", "python3", "train.py"});
  unsetenv("HVDRUN_HOROVOD");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "HVDRUN_HOROVOD 'yes please': expected 0 or 1");
  EXPECT_EQ(r.error().kind, ErrorKind::kUsage);
}

TEST(Options, NumericSettingsInTheEnvironmentAreCheckedBeforeAnythingStarts) {
  struct Case {
    const char* env;
    const char* value;
    const char* message;
  } cases[] = {
      {"HVDRUN_HEARTBEAT_TIMEOUT", "2",
       "HVDRUN_HEARTBEAT_TIMEOUT '2': expected a number from 3 to 1e+07 (seconds) (longer than the 2 s between "
       "heartbeats)"},
      {"HVDRUN_TIMEOUT", "abc", "HVDRUN_TIMEOUT 'abc': expected a number (seconds)"},
      {"HOROVOD_FUSION_THRESHOLD", "-1", "HOROVOD_FUSION_THRESHOLD '-1': expected a number from 0 to"},
      {"HVDRUN_SEGMENT_BYTES", "100", "HVDRUN_SEGMENT_BYTES '100': expected a number from 4096 to"},
      {"HVDRUN_SOCKET_BUFFER", "16384",
       "HVDRUN_SOCKET_BUFFER '16384': expected a number from 65536 to 1.07374e+09 (bytes) (or 0: the kernel's default)"},
  };
  for (const auto& c : cases) {
    setenv(c.env, c.value, 1);
    auto r = parse({"-np", "2", "true"});
    unsetenv(c.env);
    ASSERT_FALSE(r.ok()) << c.env;
    EXPECT_EQ(r.error().message.rfind(c.message, 0), 0u) << r.error().message;
    EXPECT_EQ(r.error().kind, ErrorKind::kUsage);
  }
  setenv("HVDRUN_HEARTBEAT_TIMEOUT", "3.5", 1);
  auto ok = parse({"-np", "2", "true"});
  unsetenv("HVDRUN_HEARTBEAT_TIMEOUT");
  EXPECT_TRUE(ok.ok()) << ok.error().message;
  setenv("HVDRUN_SOCKET_BUFFER", "0", 1);  // the kernel's default
  auto zero = parse({"-np", "2", "true"});
  unsetenv("HVDRUN_SOCKET_BUFFER");
  EXPECT_TRUE(zero.ok()) << zero.error().message;
}

TEST(Options, StartTimeoutFromEnvironment) {
  setenv("HVDRUN_START_TIMEOUT", "7", 1);
  auto r = parse({"-np", "1", "true"});
  unsetenv("HVDRUN_START_TIMEOUT");
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->options.start_timeout, 7);
}

TEST(Options, UsageErrorsAreOneLineExitTwo) {
  struct Case {
    std::vector<std::string> args;
    const char* part;
  } cases[] = {
      {{"-np", "abc", "true"}, "-np 'abc': expected an integer"},
      {{"-np", "0", "true"}, "-np '0': expected an integer from 1"},
      {{"-np", "2"}, "missing command"},
      {{"-np", "1", "--launcher", "pbs", "true"}, "pbs"},
      {{"-H", "a", "--hostfile", "f", "true"}, "cannot be used together"},
      {{"--bogus", "true"}, "unknown option '--bogus'"},
      {{"-np", "1", "--start-timeout", "soon", "true"}, "--start-timeout 'soon': expected a number"},
      {{"-np", "1", "-p", "70000", "true"}, "--ssh-port '70000'"},
      {{"-np", "1", "--log-level", "loud", "true"}, "loud"},
      {{"-np", "1", "--nccl-debug", "chatty", "true"}, "chatty"},
      {{"-np", "1", "--ssh-host-key-checking", "maybe", "true"}, "maybe"},
  };
  for (const auto& c : cases) {
    auto r = parse(c.args);
    ASSERT_FALSE(r.ok()) << c.part;
    EXPECT_EQ(exit_code_for(r.error()), 2);
    EXPECT_NE(r.error().message.find(c.part), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  }
}

TEST(Options, HelpAndVersion) {
  auto r = parse({"--help"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->action, ParsedCommandLine::Action::kPrintAndExit);
  EXPECT_NE(r->print.find("--hostfile"), std::string::npos);
  r = parse({"--help-env"});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->print.find("HVDRUN_TIMEOUT (default 60)"), std::string::npos) << r->print;
  EXPECT_NE(r->print.find("HOROVOD_CROSS_RANK"), std::string::npos);
  r = parse({"--version"});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->print.find("hvdrun "), std::string::npos);
}

// --help in horovodrun's groups, in order, each option under its own group's title.
TEST(Options, HelpListsTheOptionsInHorovodrunsGroups) {
  auto r = parse({"--help"});
  ASSERT_TRUE(r.ok());
  const std::string& h = r->print;
  const std::pair<const char*, std::vector<const char*>> groups[] = {
      {"\nLaunch:\n", {"--num-proc", "--hostfile", "--launch-command", "--check-build"}},
      {"\nSSH:\n", {"--ssh-port", "--ssh-command"}},
      {"\nController and Horovod compatibility:\n", {"--horovod-compat", "--gloo", "--mpi-args"}},
      {"\nElastic:\n", {"--reset-limit", "--host-discovery-script", "--max-restarts"}},
      {"\nTuning:\n", {"--fusion-threshold-mb", "--autotune", "--hierarchical-allreduce"}},
      {"\nTimeline:\n", {"--timeline-filename", "--timeline-mark-cycles"}},
      {"\nLogging and output:\n", {"--log-level", "--output-filename", "--log-hide-timestamp"}},
  };
  std::vector<size_t> starts;
  for (const auto& [title, _] : groups) starts.push_back(h.find(title));
  starts.push_back(h.size());
  for (size_t i = 0; i + 1 < starts.size(); ++i) {
    ASSERT_NE(starts[i], std::string::npos) << groups[i].first << h;
    ASSERT_LT(starts[i], starts[i + 1]) << groups[i].first;
    for (const char* opt : groups[i].second) {
      size_t at = h.find(std::string("  ") + opt + " ");
      if (at == std::string::npos) at = h.find(std::string(",") + opt + " ");
      EXPECT_TRUE(at > starts[i] && at < starts[i + 1]) << opt << " not under " << groups[i].first;
    }
  }
  EXPECT_EQ(h.find("\nOptions:\n"), std::string::npos) << "an option without a group";
}

}  // namespace hvdrun
