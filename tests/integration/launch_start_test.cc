// The start path's cost does not grow with the host's other processes: with 2,000 idle
// processes of another user on the host, a launch and a --dry-run open or stat nothing under
// their /proc/PID (counted by tests/integration/proc_access_log.c, an LD_PRELOAD: files
// touched, not time). hvdrun used to read /proc/PID/stat of every process before the first
// spawn and at the end, and to stat every /proc/PID for its RLIMIT_NPROC budget.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "launch_test_util.h"

using namespace testing_hvdrun;
using namespace launch_test;

namespace {

// `n` processes that wait for a signal, as user `uid` (when we are root).
struct IdleProcesses {
  IdleProcesses(int n, uid_t uid) {
    for (int i = 0; i < n; ++i) {
      pid_t p = fork();
      if (p == 0) {
        if (getuid() == 0 && setresuid(uid, uid, uid) != 0) _exit(1);
        pause();
        _exit(0);
      }
      if (p < 0) break;
      pids.insert(p);
    }
  }
  ~IdleProcesses() {
    for (pid_t p : pids) kill(p, SIGKILL);
    for (pid_t p : pids) waitpid(p, nullptr, 0);
  }
  std::set<pid_t> pids;
};

// The accesses the log holds to any of `pids`.
int accesses_to(const std::string& log, const std::set<pid_t>& pids) {
  int n = 0;
  std::ifstream in(log);
  for (long pid; in >> pid;) n += pids.count(static_cast<pid_t>(pid)) ? 1 : 0;
  return n;
}

}  // namespace

TEST(LaunchStart, TwoThousandIdleProcessesOfAnotherUserAreNeverLookedAt) {
  std::string dir = make_temp_dir();
  std::string log = dir + "/proc.log";
  // Written by hvdrun under another user too (the last part).
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  std::ofstream{log};
  ASSERT_EQ(chmod(log.c_str(), 0666), 0);
  IdleProcesses idle(2000, static_cast<uid_t>(300000 + getpid() % 100000));
  ASSERT_EQ(idle.pids.size(), 2000u);
  std::map<std::string, std::string> env = {{"LD_PRELOAD", PROC_ACCESS_LOG_LIB},
                                            {"HVDRUN_TEST_PROC_LOG", log},
                                            {"ASAN_OPTIONS", "verify_asan_link_order=0"}};
  // The log works: a look at one of them is counted.
  std::string control = dir + "/control.log";
  auto cat = run({"cat", "/proc/" + std::to_string(*idle.pids.begin()) + "/stat"}, 60,
                 {{"LD_PRELOAD", PROC_ACCESS_LOG_LIB}, {"HVDRUN_TEST_PROC_LOG", control}});
  ASSERT_EQ(cat.exit_code, 0) << cat.err;
  ASSERT_EQ(accesses_to(control, idle.pids), 1);
  auto dry = run(hvd({"-np", "4", "--dry-run", "true"}), 60, env);
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  auto job = run(hvd({"-np", "4", "true"}), 60, env);
  ASSERT_EQ(job.exit_code, 0) << job.err;
  EXPECT_EQ(accesses_to(log, idle.pids), 0) << "hvdrun opened or stat'ed /proc/PID of processes not its own";
  if (getuid() != 0) return;
  // As a user of its own under a finite RLIMIT_NPROC (the budget's check runs; root is exempt).
  std::string uid = std::to_string(300000 + (getpid() + 1) % 100000);
  auto as_user = run({"prlimit", "--nproc=4096", "setpriv", "--reuid=" + uid, "--regid=" + uid, "--clear-groups",
                      kHvdrun, "-np", "4", "true"},
                     60, env);
  ASSERT_EQ(as_user.exit_code, 0) << as_user.err;
  EXPECT_EQ(accesses_to(log, idle.pids), 0) << "the RLIMIT_NPROC budget looked at every process on the host";
}
