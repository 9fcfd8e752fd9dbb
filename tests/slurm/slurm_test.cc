// hvdrun inside real Slurm allocations: Debian's slurm-wlm, slurmctld and five `slurmd -N
// nI` started by tests/slurm/slurm-cluster.sh in private PID, network (loopback only),
// mount and UTS namespaces. Needs root and slurmctld/slurmd; skipped, saying why, elsewhere.
// Every Slurm client runs through `slurm-cluster.sh exec`, which refuses to run one
// outside the cluster's own network namespace.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <thread>

#include "launcher/slurm_env.h"
#include "process.h"

using namespace testing_hvdrun;

namespace {

const std::string kHvdrun = HVDRUN_BIN;
const std::string kColl = COLL_WORKER_BIN;
const std::string kScript = SLURM_CLUSTER_SCRIPT;
constexpr int kNodes = 5;  // n1..n4 in partition main; n5 also alone in partition single

bool wait_until(const std::function<bool()>& pred, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pred();
}

class SlurmCluster : public ::testing::Environment {
 public:
  void SetUp() override {
    if (geteuid() != 0) {
      skip_ = "needs root for namespaces";
      return;
    }
    if (run({"sh", "-c", "command -v slurmctld && command -v slurmd && command -v salloc"}, 10).exit_code != 0) {
      skip_ = "needs Debian's slurmctld, slurmd and slurm-client (scripts/install-deps.sh)";
      return;
    }
    dir_ = make_temp_dir();
    auto o = run({"timeout", "90", kScript, "up", dir_, std::to_string(kNodes)}, 100);
    if (o.exit_code != 0) {
      failed_ = "slurm-cluster.sh up failed: " + o.err;
      return;
    }
    // The time-limit job starts now (Slurm checks limits every 30 s, on a one-minute
    // limit): its own node, checked by the last test.
    auto tl = slurm({"sbatch", "--parsable", "-p", "single", "-N1", "--ntasks-per-node=2", "--time=1", "-o", dir_ + "/timelimit.out", "--wrap",
                     kHvdrun + " -np 2 sh -c 'echo up $HOROVOD_RANK; exec sleep 999'"});
    timelimit_job_ = tl.out.substr(0, tl.out.find('\n'));
  }
  void TearDown() override {
    if (!dir_.empty()) {
      run({"timeout", "30", kScript, "down", dir_}, 40);
      std::filesystem::remove_all(dir_);
    }
  }
  // A Slurm client (or anything) inside the cluster's namespaces.
  static Outcome slurm(std::vector<std::string> args, double seconds = 60) {
    args.insert(args.begin(), {"timeout", std::to_string(static_cast<int>(seconds)), kScript, "exec", dir_});
    return run(args, seconds + 10);
  }
  static const std::string& skip() { return skip_; }
  static const std::string& failed() { return failed_; }
  static const std::string& dir() { return dir_; }
  static const std::string& timelimit_job() { return timelimit_job_; }

 private:
  static inline std::string skip_, failed_, dir_, timelimit_job_;
};

[[maybe_unused]] auto* const kEnv = ::testing::AddGlobalTestEnvironment(new SlurmCluster);

#define REQUIRE_SLURM()                                                                   \
  if (!SlurmCluster::failed().empty()) FAIL() << SlurmCluster::failed();                  \
  if (!SlurmCluster::skip().empty()) GTEST_SKIP() << "Slurm tests skipped: " << SlurmCluster::skip()

Outcome slurm(std::vector<std::string> args, double seconds = 60) { return SlurmCluster::slurm(std::move(args), seconds); }

// Processes of jobs left in the cluster (anything but the daemons and the namespace's
// init), or only those whose command line holds `only`.
std::string leftovers(const std::string& only = "") {
  auto o = slurm({"sh", "-c", "ps -eo pid=,stat=,args= | grep -v -E ' Z |slurmctld|slurmscriptd|slurmd |python3 -c|ps -eo|grep|sh -c' || true"});
  if (only.empty()) return o.out;
  std::string out;
  for (const auto& line : split_lines(o.out))
    if (line.find(only) != std::string::npos) out += line + "\n";
  return out;
}

std::string job_state(const std::string& id) {
  auto o = slurm({"scontrol", "-o", "show", "job", id});
  auto at = o.out.find("JobState=");
  return at == std::string::npos ? "" : o.out.substr(at + 9, o.out.find(' ', at) - at - 9);
}

}  // namespace

TEST(Slurm, WithoutSrunOnPathTheJobStopsBeforeAnythingStarts) {
  // No cluster needed: an allocation's environment, and no srun to be found.
  auto o = run({kHvdrun, "true"}, 30,
               {{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "1(x2)"},
                {"PATH", "/nonexistent"}});
  EXPECT_EQ(o.exit_code, 3) << o.err;
  EXPECT_NE(o.err.find("hvdrun: --launcher slurm: srun"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("(Slurm's srun must be on PATH)"), std::string::npos) << o.err;
}

TEST(Slurm, OnlyLoopbackInsideAndNoClientOutsideIt) {
  REQUIRE_SLURM();
  auto links = slurm({"sh", "-c", "ip -o link show | awk -F': ' '{print $2}'"});
  EXPECT_EQ(links.out, "lo\n");
  // A recorded namespace that is not the cluster's (this process's pid, holding the
  // machine's own network): nothing runs.
  std::string fake = make_temp_dir(), mark = fake + "/ran";
  std::ofstream(fake + "/ns.pid") << getpid() << "\n";
  std::filesystem::copy_file(SlurmCluster::dir() + "/ns.net", fake + "/ns.net");
  auto o = run({kScript, "exec", fake, "touch", mark}, 20);
  EXPECT_EQ(o.exit_code, 99);
  EXPECT_NE(o.err.find("is not running; refusing to run a Slurm client"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(mark));
  std::filesystem::remove_all(fake);
}

TEST(Slurm, HostListsExpandAsScontrolExpandsThem) {
  REQUIRE_SLURM();
  for (const char* list : {"n[1-2,5]", "x[01-02]", "n[08-11]", "n[1-010]", "a[1-2]b[3-4]", "rack[0-1]_blade[00-01]",
                           "gpu-a[01-02],cpu7,lx[10-11,20]", "n-[1-2]", "tux[1-2],tux[5]"}) {
    auto o = slurm({"scontrol", "show", "hostnames", list});
    ASSERT_EQ(o.exit_code, 0) << o.err;
    auto ours = hvdrun::slurm::expand_hostlist(list);
    ASSERT_TRUE(ours.ok()) << list;
    std::string joined;
    for (const auto& h : *ours) joined += h + "\n";
    EXPECT_EQ(joined, o.out) << list;
  }
}

TEST(Slurm, SallocRanksLandOnTheirNodes) {
  REQUIRE_SLURM();
  // Each rank names the node its agent (its parent) was started on by srun, and sees that
  // node's Slurm variables, not hvdrun's (no task id of srun's).
  auto o = slurm({"salloc", "-N4", "--ntasks-per-node=2", kHvdrun, "sh", "-c",
                  "echo $HOROVOD_RANK/$HOROVOD_SIZE $HOROVOD_LOCAL_RANK $HOROVOD_HOSTNAME "
                  "$(tr '\\0' '\\n' < /proc/$PPID/environ | sed -n 's/^SLURMD_NODENAME=//p') "
                  "$SLURMD_NODENAME $SLURM_NODEID ${SLURM_PROCID-none} $SLURM_JOB_ID"},
                 90);
  ASSERT_FALSE(o.timed_out);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  for (int r = 0; r < 8; ++r) {
    std::string node = "n" + std::to_string(r / 2 + 1);
    std::string want = "[" + std::to_string(r) + "]<stdout>:" + std::to_string(r) + "/8 " + std::to_string(r % 2) + " " +
                       node + " " + node + " " + node + " " + std::to_string(r / 2) + " none ";
    EXPECT_NE(o.out.find(want), std::string::npos) << "missing " << want << o.out;
  }
  EXPECT_EQ(o.err.find("hvdrun: n"), std::string::npos) << o.err;  // no srun chatter
}

TEST(Slurm, NpDefaultsToTheAllocationsTasks) {
  REQUIRE_SLURM();
  // -n3 on two nodes: SLURM_TASKS_PER_NODE is 2,1 and SLURM_NTASKS 3.
  auto o = slurm({"salloc", "-N2", "-n3", kHvdrun, "sh", "-c", "echo $HOROVOD_SIZE $HOROVOD_HOSTNAME"}, 90);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:3 n1\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:3 n1\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[2]<stdout>:3 n2\n"), std::string::npos) << o.out;
  // An explicit -np within the allocation wins.
  o = slurm({"salloc", "-N2", "--ntasks-per-node=2", kHvdrun, "-np", "3", "sh", "-c", "echo $HOROVOD_SIZE"}, 90);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("[2]<stdout>:3\n"), std::string::npos) << o.out;
}

TEST(Slurm, SbatchCollectivesAcrossNodes) {
  REQUIRE_SLURM();
  std::string out = SlurmCluster::dir() + "/coll.out";
  auto o = slurm({"sbatch", "--wait", "-N3", "--ntasks-per-node=2", "-o", out, "--wrap", kHvdrun + " " + kColl + " check"},
                 150);
  ASSERT_FALSE(o.timed_out);
  std::string text = read_file(out);
  EXPECT_EQ(o.exit_code, 0) << o.err << text;
  for (int r = 0; r < 6; ++r) EXPECT_NE(text.find("rank " + std::to_string(r) + " checked"), std::string::npos) << text;
}

TEST(Slurm, AFailingRankEndsTheJobWithItsCodeAndNode) {
  REQUIRE_SLURM();
  auto o = slurm({"salloc", "-N2", "--ntasks-per-node=2", kHvdrun, "--kill-grace", "2", "sh", "-c",
                  "if [ $HOROVOD_RANK = 2 ]; then sleep 0.3; exit 7; fi; exec sleep 60"},
                 60);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 7) << o.err;
  EXPECT_NE(o.err.find("hvdrun: rank 2 (host n2) exited with code 7"), std::string::npos) << o.err;
  EXPECT_TRUE(wait_until([] { return leftovers("sleep 60").empty(); }, 15)) << leftovers();
}

TEST(Slurm, ScancelEndsTheJobCleanlyWithAMessage) {
  REQUIRE_SLURM();
  std::string d = SlurmCluster::dir(), out = d + "/scancel.out";
  auto sb = slurm({"sbatch", "--parsable", "-N2", "-o", out, "--wrap",
                   kHvdrun + " sh -c 'touch " + d + "/up$HOROVOD_RANK; exec sleep 1000'"});
  ASSERT_EQ(sb.exit_code, 0) << sb.err;
  std::string id = sb.out.substr(0, sb.out.find('\n'));
  ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(d + "/up0") && std::filesystem::exists(d + "/up1"); }, 60))
      << read_file(out);
  ASSERT_EQ(slurm({"scancel", id}).exit_code, 0);
  EXPECT_TRUE(wait_until([&] { return job_state(id) == "CANCELLED"; }, 30)) << job_state(id);
  EXPECT_TRUE(wait_until([] { return leftovers("sleep 1000").empty(); }, 20)) << leftovers();
  std::string text = read_file(out);
  EXPECT_NE(text.find("hvdrun: received SIGTERM from Slurm (the job was cancelled or reached its time limit), "
                      "terminating the job"),
            std::string::npos)
      << text;
}

TEST(Slurm, TheTimeLimitEndsTheJobWithAMessage) {
  REQUIRE_SLURM();
  const std::string& id = SlurmCluster::timelimit_job();
  ASSERT_FALSE(id.empty());
  // Submitted at set-up with a one-minute limit; Slurm looks every 30 s.
  EXPECT_TRUE(wait_until([&] { return job_state(id) == "TIMEOUT"; }, 120)) << job_state(id);
  EXPECT_TRUE(wait_until([] { return leftovers().empty(); }, 20)) << leftovers();
  std::string text = read_file(SlurmCluster::dir() + "/timelimit.out");
  EXPECT_NE(text.find("[1]<stdout>:up 1"), std::string::npos) << text;
  EXPECT_NE(text.find("DUE TO TIME LIMIT"), std::string::npos) << text;
  EXPECT_NE(text.find("hvdrun: received SIGTERM from Slurm (the job was cancelled or reached its time limit), "
                      "terminating the job"),
            std::string::npos)
      << text;
}
