// The discovery script run once: its stdout captured, its status, a hung script killed with
// what it started, a failure or bad line on the first run the job's end, named.
#include "launcher/discovery_runner.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>
#include <fstream>
#include <string>

namespace hvdrun {
namespace {

// Exists and is not a zombie (an orphan's zombie may wait for a reaper that never comes).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// Waits (up to 10 s: a SIGKILL takes effect asynchronously) until `pid` is gone.
bool gone(pid_t pid) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (alive(pid) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return !alive(pid);
}

TEST(DiscoveryRunner, OutputAndStatusCaptured) {
  auto o = run_discovery_script("echo b:2; echo a; echo oops >&2; exit 0", 30);
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->out, "b:2\na\n");
  EXPECT_FALSE(o->run.timed_out);
  EXPECT_EQ(o->run.exit_code, 0);
  auto failed = run_discovery_script("echo a; exit 4", 30);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->run.exit_code, 4);
  auto killed = run_discovery_script("kill -9 $$", 30);
  ASSERT_TRUE(killed.ok());
  EXPECT_EQ(killed->run.exit_code, 128 + SIGKILL);
}

TEST(DiscoveryRunner, AHungScriptIsKilledWithWhatItStarted) {
  std::string pidfile = testing::TempDir() + "/discovery_sleeper.pid";
  std::remove(pidfile.c_str());
  // The script starts a child that holds its stdout, says its pid, then hangs.
  auto o = run_discovery_script("sleep 1000 & echo $! > " + pidfile + "; echo a:1; wait", 0.5);
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->run.timed_out);
  EXPECT_EQ(o->out, "a:1\n");  // what it printed before the time-out
  pid_t sleeper = 0;
  std::ifstream(pidfile) >> sleeper;
  ASSERT_GT(sleeper, 0);
  EXPECT_TRUE(gone(sleeper)) << "the script's child was left running";
  auto once = discover_hosts_once("sleep 1000", 1, 0.2);
  ASSERT_FALSE(once.ok());
  EXPECT_EQ(once.error().message,
            "--host-discovery-script 'sleep 1000': still running after 0.2 s (HVDRUN_DISCOVERY_TIMEOUT): killed");
}

TEST(DiscoveryRunner, FirstRunHostsOrItsFailureNamed) {
  auto hosts = discover_hosts_once("printf 'z:2\\nb\\n'", 4, 30);
  ASSERT_TRUE(hosts.ok()) << hosts.error().message;
  EXPECT_EQ(*hosts, (std::vector<HostSlots>{{"z", 2}, {"b", 4}}));
  auto bad = discover_hosts_once("printf 'z:2\\nb:x\\n'", 1, 30);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("line 2 'b:x'"), std::string::npos) << bad.error().message;
  auto failed = discover_hosts_once("exit 3", 1, 30);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().message, "--host-discovery-script 'exit 3': exited with status 3");
}

}  // namespace
}  // namespace hvdrun
