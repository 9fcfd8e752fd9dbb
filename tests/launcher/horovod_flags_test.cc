// horovodrun's spellings (issue 16.3): every flag of horovod/runner/launch.py is accepted,
// mapped to the workers' variables, refused clearly (--mpi, a bad elastic value), or an unknown
// option: exit 2 with one line naming it, never help text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "launcher/options.h"
#include "launcher/exit_status.h"

namespace hvdrun {
namespace {

ParsedCommandLine ok(std::vector<std::string> args) {
  auto r = parse_command_line(args);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : ParsedCommandLine{};
}

bool has_env(const LaunchOptions& o, const std::string& kv) {
  return std::find(o.env.begin(), o.env.end(), kv) != o.env.end();
}

TEST(HorovodFlags, SingleDashSpellings) {
  auto a = ok({"-hostfile", "hosts.txt", "prog"});
  EXPECT_EQ(a.action, ParsedCommandLine::Action::kRun);
  EXPECT_EQ(a.options.hostfile, "hosts.txt");
  EXPECT_EQ(ok({"-hostfile=h2", "prog"}).options.hostfile, "h2");
  auto p = ok({"-np", "2", "-prefix-timestamp", "prog"});
  EXPECT_TRUE(p.options.timestamps);
  EXPECT_EQ(p.options.ssh_port, 0);
  EXPECT_EQ(p.options.np, 2);
  EXPECT_EQ(ok({"-cb"}).action, ParsedCommandLine::Action::kPrintAndExit);
  EXPECT_NE(ok({"--check-build"}).print.find("Shared memory"), std::string::npos);
  EXPECT_NE(ok({"-v"}).print.find("hvdrun "), std::string::npos);
  EXPECT_EQ(ok({"-xFOO=1", "prog"}).options.env.back(), "FOO=1");  // a value glued to -x still works
}

TEST(HorovodFlags, LogLevelsInAnyCase) {
  EXPECT_EQ(ok({"--log-level", "INFO", "prog"}).options.log_level, "info");
  EXPECT_EQ(ok({"--log-level", "WARNING", "prog"}).options.log_level, "warn");
  EXPECT_EQ(ok({"--log-level", "Fatal", "prog"}).options.log_level, "critical");
  EXPECT_FALSE(parse_command_line({"--log-level", "loud", "prog"}).ok());
}

TEST(HorovodFlags, TuningFlagsSetTheWorkersVariables) {
  auto r = ok({"--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5", "--cache-capacity", "2048",
               "--stall-check-warning-time-seconds", "90", "--stall-check-shutdown-time-seconds", "300", "prog"});
  EXPECT_TRUE(has_env(r.options, "HOROVOD_FUSION_THRESHOLD=33554432"));
  EXPECT_TRUE(has_env(r.options, "HOROVOD_CYCLE_TIME=2.5"));
  EXPECT_TRUE(has_env(r.options, "HOROVOD_CACHE_CAPACITY=2048"));
  EXPECT_TRUE(has_env(r.options, "HOROVOD_STALL_CHECK_TIME_SECONDS=90"));
  EXPECT_TRUE(has_env(r.options, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=300"));
  EXPECT_TRUE(r.warnings.empty()) << r.warnings[0];  // the runtime reads all of these
  // -x comes after the flags: it wins.
  auto x = ok({"--cache-capacity", "5", "-x", "HOROVOD_CACHE_CAPACITY=6", "prog"});
  EXPECT_LT(std::find(x.options.env.begin(), x.options.env.end(), "HOROVOD_CACHE_CAPACITY=5"),
            std::find(x.options.env.begin(), x.options.env.end(), "HOROVOD_CACHE_CAPACITY=6"));
  EXPECT_FALSE(parse_command_line({"--fusion-threshold-mb", "lots", "prog"}).ok());
}

TEST(HorovodFlags, FlagsNotActedOnGetOneWarning) {
  auto r = ok({"--autotune", "--autotune-log-file", "a.csv", "--num-nccl-streams", "2", "--thread-affinity", "1",
               "--gloo-timeout-seconds", "60", "--mpi-args=--map-by ppr", "--binding-args", "-bind-to none",
               "--log-without-timestamp", "--mpi-threads-disable", "--no-stall-check", "--disable-cache", "--gloo",
               "prog"});
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("--autotune, --autotune-log-file"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[0].find("--mpi-args"), std::string::npos);
  EXPECT_NE(r.warnings[0].find("does not act on them yet"), std::string::npos);
  // Acted on: --binding-args as --bind-to, --thread-affinity by the engine's thread.
  EXPECT_EQ(r.warnings[0].find("--binding-args"), std::string::npos) << r.warnings[0];
  EXPECT_EQ(r.warnings[0].find("--thread-affinity"), std::string::npos) << r.warnings[0];
  EXPECT_EQ(r.options.bind_to, "none");
  EXPECT_TRUE(has_env(r.options, "HOROVOD_THREAD_AFFINITY=1"));
  EXPECT_TRUE(has_env(r.options, "HOROVOD_AUTOTUNE=1"));
  EXPECT_TRUE(has_env(r.options, "HOROVOD_NUM_NCCL_STREAMS=2"));
  EXPECT_TRUE(has_env(r.options, "HOROVOD_LOG_HIDE_TIME=1"));
}

TEST(HorovodFlags, NetworkInterfacesTcpAndRefusals) {
  auto n = ok({"--network-interfaces", "eth1,eth2", "prog"});
  EXPECT_EQ(n.options.network_interface, "eth1");
  EXPECT_EQ(n.warnings.size(), 1u);
  EXPECT_TRUE(has_env(ok({"--tcp", "prog"}).options, "HVDRUN_SHM=0"));
  for (std::vector<std::string> bad : {std::vector<std::string>{"--min-np", "0", "prog"},
                                       {"--max-np", "x", "prog"},
                                       {"--blacklist-cooldown-range", "1", "2", "prog"},
                                       {"--mpi", "prog"},
                                       {"-hostfilex", "f", "prog"},
                                       {"--no-such-flag", "prog"},
                                       {"-hx", "prog"}}) {
    auto r = parse_command_line(bad);
    ASSERT_FALSE(r.ok()) << bad[0];
    EXPECT_EQ(exit_code_for(r.error()), 2) << bad[0];
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
    EXPECT_NE(r.error().message.find(bad[0] == "-hx" ? "-hx" : bad[0]), std::string::npos) << r.error().message;
  }
}

TEST(HorovodFlags, ConfigFileAsHorovodrunsCommandLineWins) {
  std::string path = testing::TempDir() + "/hvd_config.yaml";
  std::ofstream(path) << "params:\n  fusion_threshold_mb: 3\n  cycle_time_ms: 2.5\n  cache_capacity: 9\n"
                         "autotune:\n  enabled: false\nstall_check:\n  enabled: false\n  warning_time_seconds: 5\n"
                         "logging:\n  level: DEBUG\n";
  auto r = ok({"--config-file", path, "--cache-capacity", "10", "prog"});
  EXPECT_TRUE(has_env(r.options, "HOROVOD_FUSION_THRESHOLD=3145728"));
  EXPECT_TRUE(has_env(r.options, "HOROVOD_CYCLE_TIME=2.5"));
  EXPECT_TRUE(has_env(r.options, "HOROVOD_CACHE_CAPACITY=10"));
  EXPECT_FALSE(has_env(r.options, "HOROVOD_CACHE_CAPACITY=9"));
  EXPECT_TRUE(has_env(r.options, "HOROVOD_AUTOTUNE=0"));
  EXPECT_TRUE(has_env(r.options, "HOROVOD_STALL_CHECK_DISABLE=1"));
  EXPECT_TRUE(has_env(r.options, "HOROVOD_STALL_CHECK_TIME_SECONDS=5"));
  EXPECT_EQ(r.options.log_level, "debug");
  std::ofstream(path) << "params:\n  no_such_key: 1\n";
  auto bad = parse_command_line({"--config-file", path, "prog"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("unknown key 'params.no_such_key'"), std::string::npos) << bad.error().message;
  std::ofstream(path) << "params: [1, 2\n";
  EXPECT_FALSE(parse_command_line({"--config-file", path, "prog"}).ok());
  EXPECT_FALSE(parse_command_line({"--config-file", "/", "prog"}).ok());
  std::remove(path.c_str());
}

// logging.level takes the spellings --log-level takes (WARNING, fatal) and nothing else; the
// command line's --log-level wins (issue 25.6: the check is one function, no longer a goto).
TEST(HorovodFlags, ConfigFileLogLevelIsCheckedAsTheFlagIs) {
  std::string path = testing::TempDir() + "/hvd_config_level.yaml";
  std::ofstream(path) << "logging:\n  level: WARNING\n";
  EXPECT_EQ(ok({"--config-file", path, "prog"}).options.log_level, "warn");
  EXPECT_EQ(ok({"--config-file", path, "--log-level", "error", "prog"}).options.log_level, "error");
  std::ofstream(path) << "logging:\n  level: loud\n";
  auto bad = parse_command_line({"--config-file", path, "prog"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kUsage);
  EXPECT_NE(bad.error().message.find("logging.level 'loud': expected trace"), std::string::npos) << bad.error().message;
  EXPECT_EQ(ok({"--config-file", path, "--log-level", "info", "prog"}).options.log_level, "info");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace hvdrun
