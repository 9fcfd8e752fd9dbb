// Multi-host jobs on real sshd hosts: network namespaces joined by a bridge, each with its
// own sshd (tests/cluster/cluster.sh). Needs root; skipped, saying why, elsewhere.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <thread>

#include "process.h"

using namespace testing_hvdrun;

namespace {

const std::string kHvdrun = HVDRUN_BIN;
const std::string kColl = COLL_WORKER_BIN;
const std::string kCluster = CLUSTER_SCRIPT;
constexpr int kHosts = 4;

// Runs a shell command with a deadline; its stdout.
std::string sh(const std::string& cmd, double seconds = 30) {
  auto o = run({"timeout", std::to_string(static_cast<int>(seconds)), "sh", "-c", cmd}, seconds + 5);
  return o.out;
}

class Cluster : public ::testing::Environment {
 public:
  void SetUp() override {
    if (geteuid() != 0) {
      skip_ = "needs root for network namespaces";
      return;
    }
    if (access("/usr/sbin/sshd", X_OK) != 0) {
      skip_ = "needs /usr/sbin/sshd (openssh-server)";
      return;
    }
    dir_ = make_temp_dir();
    auto o = run({"timeout", "60", kCluster, "up", dir_, std::to_string(kHosts)}, 70);
    if (o.exit_code != 0) failed_ = "cluster.sh up failed: " + o.err;  // root with sshd: it must come up
    for (int i = 1; i <= kHosts; ++i) {
      std::string n = sh("ip netns exec hvdh" + std::to_string(i) + " readlink /proc/self/ns/net");
      netns_["h" + std::to_string(i)] = n.substr(0, n.find('\n'));
    }
    netns_["localhost"] = std::filesystem::read_symlink("/proc/self/ns/net").string();
  }
  void TearDown() override {
    if (!dir_.empty()) {
      run({"timeout", "60", kCluster, "down", dir_}, 70);
      std::filesystem::remove_all(dir_);
    }
  }
  static const std::string& skip() { return skip_; }
  static const std::string& failed() { return failed_; }
  static const std::string& dir() { return dir_; }
  static std::string home() { return dir_ + "/home"; }
  static const std::string& netns(const std::string& host) { return netns_[host]; }

 private:
  static inline std::string skip_, failed_, dir_;
  static inline std::map<std::string, std::string> netns_;
};

[[maybe_unused]] auto* const kEnv = ::testing::AddGlobalTestEnvironment(new Cluster);

#define REQUIRE_CLUSTER()                                                                \
  if (!Cluster::failed().empty()) FAIL() << Cluster::failed();                           \
  if (!Cluster::skip().empty()) GTEST_SKIP() << "cluster tests skipped: " << Cluster::skip()

Outcome hvdrun(std::vector<std::string> args, double seconds = 90, std::map<std::string, std::string> env = {}) {
  args.insert(args.begin(), kHvdrun);
  env.emplace("HOME", Cluster::home());
  return run(args, seconds, env);
}

// Processes other than sshd in the test hosts' namespaces (and the given local pids).
std::string leftovers() {
  return sh("for n in $(seq 1 " + std::to_string(kHosts) +
            "); do ip netns pids hvdh$n; done | xargs -r ps -o pid=,comm= -p | grep -v ' sshd$' || true");
}

bool wait_until(const std::function<bool()>& pred, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

std::string openssh_command() {
  std::string d = Cluster::home() + "/.ssh";
  return "ssh -F " + d + "/config -i " + d + "/id_ed25519 -o UserKnownHostsFile=" + d +
         "/known_hosts -o StrictHostKeyChecking=accept-new -o BatchMode=yes";
}

}  // namespace

TEST(Cluster, RanksLandOnTheRightHostsInTheLaunchersDirectory) {
  REQUIRE_CLUSTER();
  auto o = hvdrun({"-np", "9", "-H", "localhost:1,h1:2,h2:2,h3:2,h4:2", "sh", "-c",
                   "echo $HOROVOD_RANK $HOROVOD_HOSTNAME $(readlink /proc/self/ns/net) $PWD $HVDRUN_IFACE"});
  ASSERT_FALSE(o.timed_out);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  std::string cwd = std::filesystem::current_path().string();
  const char* hosts[] = {"localhost", "h1", "h1", "h2", "h2", "h3", "h3", "h4", "h4"};
  for (int r = 0; r < 9; ++r) {
    std::string want = "[" + std::to_string(r) + "]<stdout>:" + std::to_string(r) + " " + hosts[r] + " " +
                       Cluster::netns(hosts[r]) + " " + cwd + " " + (r == 0 ? "hvdbr0" : "eth0") + "\n";
    EXPECT_NE(o.out.find(want), std::string::npos) << "missing: " << want << "in:\n" << o.out;
  }
}

TEST(Cluster, CollectivesAcrossHosts) {
  REQUIRE_CLUSTER();
  auto o = hvdrun({"-np", "7", "-H", "localhost:1,h1:2,h2:2,h3:1,h4:1", kColl, "check"}, 180);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  for (int r = 0; r < 7; ++r)
    EXPECT_NE(o.out.find("rank " + std::to_string(r) + " checked"), std::string::npos) << o.out;
}

// 2 hosts x 2 ranks: the local rings over shared memory (two segments a rank, beside the
// global ring's one same-host link), the cross rings over TCP between the hosts.
TEST(Cluster, HierarchicalCollectivesAcrossHosts) {
  REQUIRE_CLUSTER();
  for (const char* flag : {"--hierarchical-allreduce", "--hierarchical-allgather"}) {
    auto o = hvdrun({"-np", "4", "-H", "h1:2,h2:2", flag, kColl, "check"}, 180,
                    {{"HVDRUN_HIERARCHICAL_ALLREDUCE", "0"}, {"HVDRUN_HIERARCHICAL_ALLGATHER", "0"}});
    ASSERT_FALSE(o.timed_out);
    EXPECT_EQ(o.exit_code, 0) << o.err;
    for (int r = 0; r < 4; ++r)
      EXPECT_NE(o.out.find("rank " + std::to_string(r) + " checked (3 shared segments)"), std::string::npos)
          << flag << ":\n" << o.out;
  }
  auto o = hvdrun({"-np", "4", "-H", "h1:2,h2:2", kColl, "check"}, 180,
                  {{"HVDRUN_HIERARCHICAL_ALLREDUCE", "0"}, {"HVDRUN_HIERARCHICAL_ALLGATHER", "0"}});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(o.out.find("rank " + std::to_string(r) + " checked (1 shared segments)"), std::string::npos) << o.out;
}

TEST(Cluster, ThroughTheOpenSshClient) {
  REQUIRE_CLUSTER();
  auto o = hvdrun({"-np", "4", "-H", "h1:2,h2:2", "--ssh-command", openssh_command(), kColl, "check"}, 180);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("rank 3 checked"), std::string::npos) << o.out;
}

TEST(Cluster, SecretAndEnvironmentAreNeverOnARemoteCommandLine) {
  REQUIRE_CLUSTER();
  std::string dir = make_temp_dir();
  // Each remote rank looks at every command line on the machine (all namespaces share the
  // pid namespace) for its secret and for a -x variable's value.
  // The value of MARKER is in the environment only (forwarded with -x MARKER).
  auto o = hvdrun({"-np", "2", "-H", "h1:1,h2:1", "-x", "MARKER", "sh", "-c",
                   "printf '%s\\n%s\\n' \"$HVDRUN_SECRET\" \"$MARKER\" > " + dir +
                       "/s$HOROVOD_RANK; test ${#HVDRUN_SECRET} = 64 && test -n \"$MARKER\" || exit 9; "
                       "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done > " + dir +
                       "/c$HOROVOD_RANK; n=$(grep -c -F -f " + dir + "/s$HOROVOD_RANK " + dir + "/c$HOROVOD_RANK); echo $n; test $n = 0"},
                  90, {{"MARKER", "hvdrun-marker-7d1c"}});
  std::filesystem::remove_all(dir);
  // Each rank exits 0 only when it found nothing: a rank that exited 1 first would tear
  // the other down before it printed (as it did under load, when grep -c's 1 was the pass).
  EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:0"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:0"), std::string::npos) << o.out;
}

TEST(Cluster, UnreachableHostIsNamedAndNothingStartsAnywhere) {
  REQUIRE_CLUSTER();
  std::string mark = Cluster::dir() + "/started-unreachable";
  auto o = hvdrun({"-np", "2", "-H", "h1:1,10.250.0.99:1", "--start-timeout", "20", "touch", mark}, 60);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_NE(o.err.find("hvdrun: 10.250.0.99:22: no route to host"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("nothing was started on any host"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(mark));
  EXPECT_TRUE(wait_until([] { return leftovers().empty(); }, 10)) << leftovers();
}

TEST(Cluster, WrongPortIsConnectionRefused) {
  REQUIRE_CLUSTER();
  auto o = hvdrun({"-np", "2", "-H", "h1:1,h2:1", "-p", "2222", "true"}, 60);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_NE(o.err.find("hvdrun: h1:2222: connection refused"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("hvdrun: h2:2222: connection refused"), std::string::npos) << o.err;
}

TEST(Cluster, WrongKeyIsAuthenticationFailed) {
  REQUIRE_CLUSTER();
  std::string key = Cluster::dir() + "/stranger";
  sh("rm -f " + key + "*; ssh-keygen -q -t ed25519 -N '' -f " + key);
  auto o = hvdrun({"-np", "1", "-H", "h1:1", "-i", key, "true"}, 60);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_NE(o.err.find("hvdrun: h1:22: authentication failed (publickey)"), std::string::npos) << o.err;
}

TEST(Cluster, HostKeyPolicies) {
  REQUIRE_CLUSTER();
  std::string kh = Cluster::home() + "/.ssh/known_hosts";
  std::string saved = read_file(kh);
  // accept-new (default) records an unknown host.
  sh(": > " + kh);
  auto o = hvdrun({"-np", "1", "-H", "h3:1", "true"}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(read_file(kh).find("10.250.0.13"), std::string::npos);
  // A changed key is refused.
  std::string fake = Cluster::dir() + "/fakehost";
  sh("rm -f " + fake + "*; ssh-keygen -q -t ed25519 -N '' -f " + fake + "; echo \"10.250.0.13 $(cut -d' ' -f1,2 " +
     fake + ".pub)\" > " + kh);
  o = hvdrun({"-np", "1", "-H", "h3:1", "true"}, 60);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_NE(o.err.find("hvdrun: h3:22: host key changed"), std::string::npos) << o.err;
  // ... unless checking is off.
  o = hvdrun({"-np", "1", "-H", "h3:1", "--ssh-host-key-checking", "no", "true"}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  // yes: an unknown host is refused.
  sh(": > " + kh);
  o = hvdrun({"-np", "1", "-H", "h3:1", "--ssh-host-key-checking", "yes", "true"}, 60);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_NE(o.err.find("hvdrun: h3:22: host key unknown"), std::string::npos) << o.err;
  std::ofstream(kh) << saved;
}

TEST(Cluster, UserSshConfigIsHonoured) {
  REQUIRE_CLUSTER();
  // A home whose only key has a name ssh would not try by itself: IdentityFile, HostName,
  // User and Port come from ~/.ssh/config.
  std::string home = Cluster::dir() + "/home2";
  sh("rm -rf " + home + "; mkdir -p " + home + "/.ssh; cp " + Cluster::home() + "/.ssh/id_ed25519 " + home +
     "/.ssh/work_key; printf 'Host node-a\\n  HostName 10.250.0.14\\n  User root\\n  IdentityFile " + home +
     "/.ssh/work_key\\nHost node-b\\n  HostName 10.250.0.14\\n  Port 2222\\n' > " + home + "/.ssh/config");
  auto o = run({kHvdrun, "-np", "1", "-H", "node-a:1", "sh", "-c", "echo $(readlink /proc/self/ns/net)"}, 60,
               {{"HOME", home}});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find(Cluster::netns("h4")), std::string::npos) << o.out;
  o = run({kHvdrun, "-np", "1", "-H", "node-b:1", "true"}, 60, {{"HOME", home}});
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_NE(o.err.find("hvdrun: node-b:2222: connection refused"), std::string::npos) << o.err;
}

TEST(Cluster, MissingRemoteHvdrunIsAClearError) {
  REQUIRE_CLUSTER();
  auto o = hvdrun({"-np", "1", "-H", "h1:1", "--remote-hvdrun", "/nonexistent/hvdrun", "true"}, 60);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_NE(o.err.find("hvdrun: h1:22: remote hvdrun /nonexistent/hvdrun not found"), std::string::npos) << o.err;
}

TEST(Cluster, MissingRemoteWorkingDirectoryIsAClearError) {
  REQUIRE_CLUSTER();
  // The remote agent runs in a mount namespace where the launcher's directory is hidden
  // under an empty tmpfs: the directory is missing on that host only.
  std::string base = Cluster::dir() + "/hidden", work = base + "/work", wrapper = Cluster::dir() + "/hiding-hvdrun";
  std::filesystem::create_directories(work);
  std::ofstream(wrapper) << "#!/bin/sh\nexec unshare -m sh -c 'mount -t tmpfs none " << base << " && exec " << kHvdrun
                         << " --agent'\n";
  chmod(wrapper.c_str(), 0755);
  auto o = run({"sh", "-c", "cd " + work + " && exec " + kHvdrun + " -np 1 -H h2:1 --remote-hvdrun " + wrapper + " true"},
               60, {{"HOME", Cluster::home()}});
  EXPECT_EQ(o.exit_code, 3) << o.err;
  EXPECT_NE(o.err.find("hvdrun: host h2: working directory " + work + " is not usable here"), std::string::npos)
      << o.err;
}

TEST(Cluster, RemoteWorkerKilledTearsDownTheJobWithItsRankAndHost) {
  REQUIRE_CLUSTER();
  auto o = hvdrun({"-np", "5", "-H", "localhost:1,h1:2,h2:2", "--kill-grace", "2", "sh", "-c",
                   "if [ $HOROVOD_RANK = 3 ]; then sleep 0.5; kill -9 $$; fi; exec sleep 60"},
                  60);
  ASSERT_FALSE(o.timed_out) << "the job did not end";
  EXPECT_EQ(o.exit_code, 137) << o.err;
  EXPECT_NE(o.err.find("hvdrun: rank 3 (host h2) was killed by signal 9 (SIGKILL)"), std::string::npos) << o.err;
  EXPECT_TRUE(wait_until([] { return leftovers().empty(); }, 10)) << leftovers();
}

TEST(Cluster, RemoteWorkerExitCodeIsTheJobs) {
  REQUIRE_CLUSTER();
  auto o = hvdrun({"-np", "4", "-H", "h1:2,h2:2", "sh", "-c", "if [ $HOROVOD_RANK = 2 ]; then exit 7; fi; exec sleep 60"},
                  60);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 7) << o.err;
  EXPECT_NE(o.err.find("hvdrun: rank 2 (host h2) exited with code 7"), std::string::npos) << o.err;
}

TEST(Cluster, SignalsReachRemoteWorkers) {
  REQUIRE_CLUSTER();
  std::string dir = make_temp_dir();
  Process p({kHvdrun, "-np", "2", "-H", "h1:1,h2:1", "sh", "-c",
             "trap 'echo got USR1' USR1; trap 'echo got TERM; exit 0' TERM; touch " + dir +
                 "/up$HOROVOD_RANK; while :; do sleep 0.05; done"},
            {{"HOME", Cluster::home()}});
  ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(dir + "/up0") && std::filesystem::exists(dir + "/up1"); }, 30));
  p.signal(SIGUSR1);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  p.signal(SIGINT);
  auto o = p.wait(30);
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 130) << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:got USR1"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:got USR1"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[0]<stdout>:got TERM"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:got TERM"), std::string::npos) << o.out;
  EXPECT_TRUE(wait_until([] { return leftovers().empty(); }, 10)) << leftovers();
}

TEST(Cluster, HvdrunSigkilledLeavesNoProcessOnAnyHost) {
  REQUIRE_CLUSTER();
  std::string dir = make_temp_dir();
  Process p({kHvdrun, "-np", "5", "-H", "localhost:1,h1:2,h2:2", "sh", "-c",
             "echo $$ > " + dir + "/pid$HOROVOD_RANK; exec sleep 1000"},
            {{"HOME", Cluster::home()}});
  ASSERT_TRUE(wait_until([&] {
    for (int r = 0; r < 5; ++r)
      if (read_file(dir + "/pid" + std::to_string(r)).empty()) return false;
    return true;
  }, 30));
  std::vector<pid_t> workers;
  for (int r = 0; r < 5; ++r) workers.push_back(std::atoi(read_file(dir + "/pid" + std::to_string(r)).c_str()));
  p.signal(SIGKILL);
  p.wait(10);
  EXPECT_TRUE(wait_until([&] {
    for (pid_t w : workers)
      if (pid_alive(w)) return false;
    return leftovers().empty();
  }, 15)) << "left: " << leftovers();
  std::filesystem::remove_all(dir);
}

TEST(Cluster, SshdKilledUnderARunningJob) {
  REQUIRE_CLUSTER();
  std::string dir = make_temp_dir();
  Process p({kHvdrun, "-np", "4", "-H", "h1:2,h2:2", "sh", "-c", "echo $$ > " + dir + "/pid$HOROVOD_RANK; exec sleep 1000"},
            {{"HOME", Cluster::home()}});
  ASSERT_TRUE(wait_until([&] { return !read_file(dir + "/pid3").empty() && !read_file(dir + "/pid0").empty(); }, 30));
  pid_t remote = std::atoi(read_file(dir + "/pid3").c_str());
  // Every sshd of h2: the listener and the job's session.
  sh("ip netns pids hvdh2 | xargs -r ps -o pid=,comm= -p | awk '$2 == \"sshd\" {print $1}' | xargs -r kill -9");
  auto o = p.wait(30);
  ASSERT_FALSE(o.timed_out) << "hvdrun did not notice the lost host";
  EXPECT_EQ(o.exit_code, 5) << o.err;  // lost contact (man page, EXIT STATUS)
  EXPECT_NE(o.err.find("hvdrun: h2:22: connection lost"), std::string::npos) << o.err;
  EXPECT_TRUE(wait_until([&] { return !pid_alive(remote) && leftovers().empty(); }, 15)) << leftovers();
  std::filesystem::remove_all(dir);
  // Bring h2's sshd back for the tests that follow in this process.
  sh("ip netns exec hvdh2 /usr/sbin/sshd -f " + Cluster::dir() + "/h2/sshd_config -E " + Cluster::dir() + "/h2/sshd.log");
}

TEST(Cluster, MasterAddrIsRankZerosHost) {
  REQUIRE_CLUSTER();
  auto o = hvdrun({"-np", "2", "-H", "h2:1,h1:1", "sh", "-c", "echo $MASTER_ADDR $HVDRUN_RENDEZVOUS_ADDR"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:10.250.0.12 10.250.0.1\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:10.250.0.12 10.250.0.1\n"), std::string::npos) << o.out;
}

// hvdrun --horovod across hosts: each host's ranks reach Horovod's store (the launcher's
// address, the interface of their own), and a host outside the job is refused.
TEST(Cluster, HorovodStoreAcrossHostsRefusesHostsOutsideTheJob) {
  REQUIRE_CLUSTER();
  std::string dir = make_temp_dir();
  std::string where = dir + "/store", done = dir + "/done";
  std::string client = std::string(TEST_SOURCE_DIR) + "/integration/horovod_store_client.py";
  Process job({kHvdrun, "--horovod", "-np", "2", "-H", "h1:1,h2:1", "/usr/bin/python3", client, "publish", where, done},
              {{"HOME", Cluster::home()}});
  ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(where); }, 60));
  std::string base = read_file(where);
  // h3 is on the same network, but not in the job: refused before its request is read.
  std::string probe = "import urllib.request, urllib.error\n"
                      "try:\n urllib.request.urlopen('" + base + "/test/rank0', timeout=10); print('status 200')\n"
                      "except urllib.error.HTTPError as e: print('status', e.code)\n"
                      "except Exception as e: print('error', e)\n";
  std::ofstream(dir + "/probe.py") << probe;
  std::string h3 = sh("ip netns exec hvdh3 /usr/bin/python3 " + dir + "/probe.py", 30);
  std::string h1 = sh("ip netns exec hvdh1 /usr/bin/python3 " + dir + "/probe.py", 30);
  std::ofstream(done) << "1";
  auto o = job.wait(90);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(h3, "status 403\n");
  EXPECT_EQ(h1, "status 200\n");  // a job host, from outside the job's processes: as horovodrun
  EXPECT_NE(o.out.find("[0]<stdout>:got b'value\\x00of 1' iface eth0 addr 10.250.0.1\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:got b'value\\x00of 0' iface eth0 addr 10.250.0.1\n"), std::string::npos) << o.out;
  EXPECT_NE(o.err.find("refused a connection from 10.250.0.13"), std::string::npos) << o.err;
  std::filesystem::remove_all(dir);
}

TEST(Cluster, PyTorchDdpAcrossHosts) {
  REQUIRE_CLUSTER();
  if (run({"/usr/bin/python3", "-c", "import torch.distributed"}, 120).exit_code != 0)
    GTEST_SKIP() << "Debian's python3-torch is not installed for /usr/bin/python3";
  std::string script = std::string(TEST_SOURCE_DIR) + "/integration/ddp_train.py";
  // torch's gloo finds its interface from GLOO_SOCKET_IFNAME, which hvdrun sets per host.
  auto o = hvdrun({"-np", "3", "-H", "h1:1,h2:1,h3:1", "/usr/bin/python3", script}, 240);
  ASSERT_FALSE(o.timed_out);
  ASSERT_EQ(o.exit_code, 0) << o.err.substr(0, 3000);
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(o.out.find("[" + std::to_string(r) + "]<stdout>:rank " + std::to_string(r) + "/3 ok"), std::string::npos)
        << o.out;
}

TEST(Cluster, SilentNetworkPartitionEndsTheJobOnBothSides) {
  REQUIRE_CLUSTER();
  std::string dir = make_temp_dir();
  Process p({kHvdrun, "-np", "4", "-H", "h1:2,h2:2", "--kill-grace", "1", "sh", "-c",
             "echo $$ > " + dir + "/pid$HOROVOD_RANK; exec sleep 1000"},
            {{"HOME", Cluster::home()}, {"HVDRUN_HEARTBEAT_TIMEOUT", "3"}});
  ASSERT_TRUE(wait_until([&] { return !read_file(dir + "/pid3").empty() && !read_file(dir + "/pid0").empty(); }, 30));
  pid_t remote = std::atoi(read_file(dir + "/pid3").c_str());
  // h2's cable pulled: packets vanish, nobody sends a FIN or a reset.
  sh("ip link set hvdv2 down");
  auto o = p.wait(30);
  bool gone = wait_until([&] { return !pid_alive(remote); }, 20);
  sh("ip link set hvdv2 up");
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(o.timed_out) << "hvdrun did not notice the partition";
  EXPECT_EQ(o.exit_code, 5) << o.err;  // lost contact
  EXPECT_NE(o.err.find("hvdrun: lost contact with the agent on h2 for "), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("it ended the ranks there"), std::string::npos) << o.err;
  EXPECT_TRUE(gone) << "h2's worker outlived the partition";
  EXPECT_TRUE(wait_until([] { return leftovers().empty(); }, 15)) << leftovers();
}

TEST(Cluster, WhatTheAgentPrintsOnStderrIsShownAsItsHosts) {
  REQUIRE_CLUSTER();
  std::string wrapper = Cluster::dir() + "/noisy-hvdrun";
  std::ofstream(wrapper) << "#!/bin/sh\necho 'a note from the remote side' >&2\nexec " << kHvdrun << " --agent\n";
  chmod(wrapper.c_str(), 0755);
  auto o = hvdrun({"-np", "1", "-H", "h1:1", "--remote-hvdrun", wrapper, "sleep", "0.3"}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.err.find("hvdrun: h1:22: a note from the remote side\n"), std::string::npos) << o.err;
}

TEST(Cluster, StdinReachesARemoteRankZero) {
  REQUIRE_CLUSTER();
  std::string input = "first line\nsecond line\n";
  for (int i = 0; i < 2000; ++i) input += "bulk " + std::to_string(i) + "\n";  // more than a pipe holds
  auto o = run({kHvdrun, "-np", "2", "-H", "h1:1,h2:1", "sh", "-c",
                "if [ $HOROVOD_RANK = 0 ]; then wc -l; else cat; echo rank1 read nothing; fi"},
               60, {{"HOME", Cluster::home()}}, &input);
  ASSERT_FALSE(o.timed_out) << "stdin's end did not reach rank 0";
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:2002\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:rank1 read nothing\n"), std::string::npos) << o.out;
}

TEST(Cluster, AnotherVersionOfHvdrunOnAHostIsRefused) {
  REQUIRE_CLUSTER();
  // A stand-in agent that says hello as version 0.0.1: a frame of its own making.
  std::string fake = Cluster::dir() + "/old-hvdrun";
  std::ofstream(fake) << "#!/usr/bin/env python3\nimport json, struct, sys\n"
                         "p = json.dumps({'launcher_addr': '10.250.0.1', 'host_addr': '10.250.0.11', 'host_iface': 'eth0',"
                         " 'free_port': 1, 'version': '0.0.1'}).encode()\n"
                         "sys.stdout.buffer.write(struct.pack('>IB', len(p) + 1, 1) + p)\nsys.stdout.flush()\n"
                         "sys.stdin.read()\n";
  chmod(fake.c_str(), 0755);
  auto o = hvdrun({"-np", "1", "-H", "h1:1", "--remote-hvdrun", fake, "true"}, 60);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_NE(o.err.find("hvdrun: h1:22: remote hvdrun " + fake + " is version 0.0.1"), std::string::npos) << o.err;
}

TEST(Cluster, HostFileAndOutputFilesWorkForRemoteRanks) {
  REQUIRE_CLUSTER();
  std::string dir = make_temp_dir();
  std::ofstream(dir + "/hosts") << "# two test hosts\nh1 slots=1\nh2 slots=2\n";
  auto o = hvdrun({"--hostfile", dir + "/hosts", "--output-filename", dir + "/out", "sh", "-c",
                   "echo out of $HOROVOD_RANK; echo err of $HOROVOD_RANK >&2"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(read_file(dir + "/out/rank." + std::to_string(r) + "/stdout"), "out of " + std::to_string(r) + "\n");
    EXPECT_EQ(read_file(dir + "/out/rank." + std::to_string(r) + "/stderr"), "err of " + std::to_string(r) + "\n");
  }
  std::filesystem::remove_all(dir);
}

TEST(Cluster, AHostThatNeverAnswersFailsWithinTheStartTimeout) {
  REQUIRE_CLUSTER();
  // h4's sshd frozen: the kernel accepts the connection, nobody speaks.
  std::string pid = read_file(Cluster::dir() + "/h4/sshd.pid");
  pid = pid.substr(0, pid.find('\n'));
  sh("kill -STOP " + pid);
  auto start = std::chrono::steady_clock::now();
  auto o = hvdrun({"-np", "2", "-H", "h1:1,h4:1", "--start-timeout", "2", "true"}, 60);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  sh("kill -CONT " + pid);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_NE(o.err.find("hvdrun: h4:22: connection timed out"), std::string::npos) << o.err;
  EXPECT_LT(took, 20) << "the start time-out was not kept";  // a bound on a hang, not a speed test
}

TEST(Cluster, ANetworkCutDuringStartUpFailsWithinTheStartTimeoutAndLeavesNoAgent) {
  REQUIRE_CLUSTER();
  // h3's cable is pulled after sshd started the agent and before the agent speaks: its
  // hello, and every packet after, vanish; nobody sends a FIN.
  std::string dir = make_temp_dir();
  std::string wrapper = dir + "/hvdrun-wrapper";
  std::ofstream(wrapper) << "#!/bin/sh\ntouch " << dir << "/started\nwhile [ ! -e " << dir
                         << "/cut ]; do sleep 0.05; done\nexec " << kHvdrun << " \"$@\"\n";
  chmod(wrapper.c_str(), 0755);
  auto start = std::chrono::steady_clock::now();
  Process p({kHvdrun, "-np", "2", "-H", "localhost:1,h3:1", "--start-timeout", "4", "--remote-hvdrun", wrapper, "true"},
            {{"HOME", Cluster::home()}});
  bool started = wait_until([&] { return std::filesystem::exists(dir + "/started"); }, 20);
  sh("ip link set hvdv3 down");
  std::ofstream(dir + "/cut") << "";
  auto o = p.wait(60);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bool agent_gone = wait_until([] { return leftovers().empty(); }, 20);
  std::string left = leftovers();
  sh("ip link set hvdv3 up");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(started) << "the agent was never started: " << o.err;
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 3) << o.err;  // could not start (man page, EXIT STATUS)
  EXPECT_NE(o.err.find("h3:22: no answer from the agent within --start-timeout (4 s)"), std::string::npos) << o.err;
  // The start time-out is kept: nothing after it waits on the silent host (the agent's
  // exit status used to, for as long again). A bound on a hang, not a speed test.
  EXPECT_LT(took, 4 + 2.5) << o.err;
  // The agent, whose launcher vanished before sending the job, gives it up once the
  // start time-out has passed (it used to wait an hour).
  EXPECT_TRUE(agent_gone) << "left on h3: " << left;
}

TEST(Cluster, KeysFromTheSshAgent) {
  REQUIRE_CLUSTER();
  // A home with no key files at all: only the agent holds the key.
  std::string home = Cluster::dir() + "/home3", sock = Cluster::dir() + "/agent.sock";
  sh("rm -rf " + home + " " + sock + "; mkdir -p " + home + "/.ssh; printf 'Host node-c\\n  HostName 10.250.0.12\\n  User root\\n' > " +
     home + "/.ssh/config");
  Process agent({"ssh-agent", "-D", "-a", sock});
  ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(sock); }, 10));
  auto added = run({"ssh-add", Cluster::home() + "/.ssh/id_ed25519"}, 30, {{"SSH_AUTH_SOCK", sock}});
  ASSERT_EQ(added.exit_code, 0) << added.err;
  auto o = run({kHvdrun, "-np", "1", "-H", "node-c:1", "true"}, 60, {{"HOME", home}, {"SSH_AUTH_SOCK", sock}});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  auto without = run({kHvdrun, "-np", "1", "-H", "node-c:1", "true"}, 60, {{"HOME", home}, {"SSH_AUTH_SOCK", ""}});
  EXPECT_EQ(without.exit_code, 3);
  EXPECT_NE(without.err.find("hvdrun: node-c:22: authentication failed (publickey)"), std::string::npos) << without.err;
}

TEST(Cluster, LargeStdinArrivesWholeOrIsDroppedWhenRankZeroStopsReading) {
  REQUIRE_CLUSTER();
  std::string input(20 << 20, 'x');  // many SSH windows' worth
  auto whole = run({kHvdrun, "-np", "1", "-H", "h1:1", "wc", "-c"}, 60, {{"HOME", Cluster::home()}}, &input);
  ASSERT_FALSE(whole.timed_out);
  EXPECT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(whole.out, "[0]<stdout>:" + std::to_string(input.size()) + "\n");
  // Rank 0 reads 10 bytes and ends: the unread input must not hold the job (a blocked
  // write once waited out the SSH time-out).
  auto partial = run({kHvdrun, "-np", "2", "-H", "h1:1,h2:1", "--start-timeout", "120", "sh", "-c",
                      "head -c 10 >/dev/null; echo done"},
                     20, {{"HOME", Cluster::home()}}, &input);
  ASSERT_FALSE(partial.timed_out) << "unread stdin held the job";
  EXPECT_EQ(partial.exit_code, 0) << partial.err;
}

// A stand-in for `kubectl exec -i POD -- CMD...`: runs CMD (argv words, no shell) inside
// the test host's network namespace, relaying stdin and stdout, as kubectl does for a pod.
std::string exec_standin() {
  std::string path = Cluster::dir() + "/fake-kubectl";
  std::ofstream(path) << "#!/bin/sh\n# fake-kubectl exec -i HOST -- CMD...\n[ \"$1\" = exec ] && [ \"$2\" = -i ] || exit 64\n"
                         "host=$3; shift 3; [ \"$1\" = -- ] && shift\n"
                         "case $host in h[0-9]) ;; *) echo \"fake-kubectl: no pod $host\" >&2; exit 1;; esac\n"
                         "exec ip netns exec hvd$host \"$@\"\n";
  chmod(path.c_str(), 0755);
  return path;
}

TEST(Cluster, CommandTemplateLaunchesLikeKubectlExecWithTheRightAddresses) {
  REQUIRE_CLUSTER();
  // No SSH anywhere: the agents report their own addresses; MASTER_ADDR is rank 0's host's.
  auto o = hvdrun({"-np", "3", "-H", "h2:2,h1:1", "--launcher", "command", "--launch-command",
                   exec_standin() + " exec -i {host} --", "sh", "-c",
                   "echo $MASTER_ADDR $HVDRUN_RENDEZVOUS_ADDR $HVDRUN_IFACE $NCCL_SOCKET_IFNAME $(readlink /proc/self/ns/net)"});
  ASSERT_FALSE(o.timed_out);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:10.250.0.12 10.250.0.1 eth0 eth0 " + Cluster::netns("h2") + "\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[2]<stdout>:10.250.0.12 10.250.0.1 eth0 eth0 " + Cluster::netns("h1") + "\n"), std::string::npos) << o.out;
  auto c = hvdrun({"-np", "4", "-H", "h3:2,h4:2", "--launch-command", exec_standin() + " exec -i {host} --", kColl, "check"}, 180);
  ASSERT_FALSE(c.timed_out);
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("rank 3 checked"), std::string::npos) << c.out;
  EXPECT_TRUE(wait_until([] { return leftovers().empty(); }, 10)) << leftovers();
}

TEST(Cluster, CommandTemplateThatCannotReachAHostNamesIt) {
  REQUIRE_CLUSTER();
  auto o = hvdrun({"-np", "2", "-H", "h1:1,nopod:1", "--launch-command", exec_standin() + " exec -i {host} --", "true"}, 60);
  EXPECT_EQ(o.exit_code, 3) << o.err;
  EXPECT_NE(o.err.find("hvdrun: nopod: the agent closed its output (exit 1): fake-kubectl: no pod nopod"), std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("nothing was started on any host"), std::string::npos) << o.err;
}

TEST(Cluster, SshCommandGivesTheRightMasterAddrToo) {
  REQUIRE_CLUSTER();
  auto o = hvdrun({"-np", "2", "-H", "h2:1,h1:1", "--ssh-command", openssh_command(), "sh", "-c",
                   "echo $MASTER_ADDR $HVDRUN_RENDEZVOUS_ADDR $GLOO_SOCKET_IFNAME"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:10.250.0.12 10.250.0.1 eth0\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:10.250.0.12 10.250.0.1 eth0\n"), std::string::npos) << o.out;
}
