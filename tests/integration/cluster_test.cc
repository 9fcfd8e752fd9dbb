// Multi-host jobs on real sshd hosts: network namespaces joined by a bridge, each with its
// own sshd (tests/cluster/cluster.sh). Needs root; skipped, saying why, elsewhere. Placement,
// collectives, the environment, Horovod's store, DDP, stdin and output across hosts. (SSH
// and launch commands: cluster_ssh_test.cc; failures: cluster_failure_test.cc.)
#include "cluster_test_util.h"

using namespace testing_hvdrun;
using namespace cluster_test;

namespace {
// The test hosts, up once for this binary (every cluster_*_test.cc uses them).
[[maybe_unused]] auto* const kEnv = ::testing::AddGlobalTestEnvironment(new Cluster);
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

// hvdrun's threads in a read of its stdin (fd 0), from /proc/<pid>/task/*/syscall
// ("0 0x0 ..." on x86-64); `looked`: how many threads could be looked at.
static std::vector<std::string> threads_reading_stdin(pid_t pid, int* looked) {
  std::vector<std::string> found;
  *looked = 0;
  std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator(task_dir, ec)) {
    std::ifstream f(t.path() / "syscall");
    std::string line;
    if (!std::getline(f, line)) continue;
    ++*looked;
    if (line.rfind("0 0x0 ", 0) == 0) found.push_back(t.path().filename().string() + ": " + line);
  }
  return found;
}

// With rank 0 on another host, hvdrun reads its stdin only when its loop's poll says it is
// readable: no thread of it waits in read(0), to take a line typed for the shell once
// hvdrun is in the background, or to outlive the job.
TEST(Cluster, NoThreadOfHvdrunWaitsInAReadOfItsStdin) {
  REQUIRE_CLUSTER();
#if !defined(__x86_64__)
  GTEST_SKIP() << "reads /proc/<pid>/task/*/syscall with x86-64's syscall numbers";
#endif
  std::string dir = make_temp_dir(), fifo = dir + "/stdin";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  int writer = open(fifo.c_str(), O_RDWR | O_CLOEXEC);  // holds it open, writes nothing yet
  ASSERT_GE(writer, 0);
  Process p({"sh", "-c", "exec \"$0\" \"$@\" < " + fifo, kHvdrun, "-np", "1", "-H", "h1:1", "sh", "-c",
             "echo started > " + dir + "/started; cat"},
            {{"HOME", Cluster::home()}});
  ASSERT_TRUE(wait_for_lines(dir + "/started", 1, 60));
  int looked = 0;
  auto reading = threads_reading_stdin(p.pid(), &looked);
  ASSERT_EQ(write(writer, "last\n", 5), 5);
  close(writer);  // the end of the input: rank 0's cat ends, and the job
  auto o = p.wait(60);
  ASSERT_FALSE(o.timed_out) << "stdin's end did not reach rank 0";
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "[0]<stdout>:last\n");
  EXPECT_GT(looked, 1) << "hvdrun's threads could not be looked at";
  EXPECT_TRUE(reading.empty()) << "hvdrun threads in read(0): " << ::testing::PrintToString(reading);
  std::filesystem::remove_all(dir);
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
