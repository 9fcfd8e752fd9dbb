// The pre-flight check on real sshd hosts (cluster_test.cc) made to differ: ib0 on h1 only,
// h2's agent saying another version (a proxy that rewrites its hello), h3 with a descriptor
// limit under what two ranks need. --check's table, the refusal before a launch, and the
// launch that --no-preflight (or a mere warning) lets through.
#include "cluster_test_util.h"

using namespace testing_hvdrun;
using namespace cluster_test;

namespace {

// One --remote-hvdrun for every host, which decides by the host's address: h2's agent
// through a proxy that says hello as version 9.9.9 (same protocol), h3's with 64
// descriptors at most, the others' as they are.
std::string differing_hvdrun() {
  std::string proxy = Cluster::dir() + "/hvdrun-9.9.9.py", path = Cluster::dir() + "/differing-hvdrun";
  std::ofstream(proxy) << "import json, os, struct, subprocess, sys, threading\n"
                          "p = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)\n"
                          "def read(n):\n"
                          "  b = b''\n"
                          "  while len(b) < n:\n"
                          "    d = p.stdout.read(n - len(b))\n"
                          "    if not d: sys.exit(1)\n"
                          "    b += d\n"
                          "  return b\n"
                          "n, t = struct.unpack('>IB', read(5))\n"
                          "hello = json.loads(read(n - 1)); hello['version'] = '9.9.9'\n"
                          "b = json.dumps(hello).encode()\n"
                          "os.write(1, struct.pack('>IB', len(b) + 1, t) + b)\n"
                          "def up():\n"
                          "  while d := os.read(0, 65536): p.stdin.write(d)\n"
                          "  p.stdin.close()\n"
                          "threading.Thread(target=up, daemon=True).start()\n"
                          "while d := os.read(p.stdout.fileno(), 65536): os.write(1, d)\n"
                          "sys.exit(p.wait())\n";
  std::ofstream(path) << "#!/bin/sh\ncase \"$(ip -o -4 addr show dev eth0)\" in\n"
                         "  *10.250.0.12/*) exec python3 " << proxy << " " << kHvdrun << " \"$@\";;\n"
                         "  *10.250.0.13/*) ulimit -n 64 && exec " << kHvdrun << " \"$@\";;\n"
                         "esac\nexec " << kHvdrun << " \"$@\"\n";
  chmod(path.c_str(), 0755);
  return path;
}

// ib0 (one end of a veth pair, both ends up: this kernel has no dummy links), with an
// address, on h1 only, for the test's time.
struct Ib0OnH1 {
  Ib0OnH1() {
    sh("ip netns exec hvdh1 sh -c 'ip link add ib0 type veth peer name ib0peer && ip addr add 10.251.0.11/24 dev ib0 "
       "&& ip link set ib0peer up && ip link set ib0 up'");
  }
  ~Ib0OnH1() { sh("ip netns exec hvdh1 ip link del ib0"); }
};

std::string row_of(const std::string& table, const std::string& host) {
  size_t at = table.find("\n" + host + " ");
  return at == std::string::npos ? "" : table.substr(at + 1, table.find('\n', at + 1) - at - 1);
}

}  // namespace

TEST(Cluster, PreflightTableMarksWhatDiffersAndTheLaunchIsRefusedBeforeAnythingStarts) {
  REQUIRE_CLUSTER();
  Ib0OnH1 ib0;
  std::string wrapper = differing_hvdrun();
  std::vector<std::string> common = {"-H", "h1:2,h2:2,h3:2", "--remote-hvdrun", wrapper, "-x", "NCCL_SOCKET_IFNAME=ib0"};
  auto args = common;
  args.insert(args.begin(), "--check");
  auto c = hvdrun(args, 60);
  ASSERT_FALSE(c.timed_out);
  EXPECT_EQ(c.exit_code, 3) << c.err;
  EXPECT_NE(row_of(c.out, "h1").find(" ib0:up:10.251.0.11 "), std::string::npos) << c.out;
  EXPECT_EQ(row_of(c.out, "h1").find_first_of("!*"), std::string::npos) << c.out;
  EXPECT_NE(row_of(c.out, "h2").find(" 9.9.9* "), std::string::npos) << c.out;
  EXPECT_NE(row_of(c.out, "h2").find(" ib0:missing! "), std::string::npos) << c.out;
  EXPECT_NE(row_of(c.out, "h3").find(" nofile 64 nproc "), std::string::npos) << c.out;
  EXPECT_NE(row_of(c.out, "h3").find("!  "), std::string::npos) << c.out;
  EXPECT_NE(c.err.find("hvdrun: warning: pre-flight: h2: hvdrun 9.9.9, this one "), std::string::npos) << c.err;
  EXPECT_EQ(c.err.find("pre-flight: h1"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("hvdrun: pre-flight: h2: NCCL_SOCKET_IFNAME=ib0: no such interface here (it has eth0, lo)\n"),
            std::string::npos) << c.err;
  EXPECT_NE(c.err.find("hvdrun: pre-flight: h3: NCCL_SOCKET_IFNAME=ib0: no such interface here (it has eth0, lo); "
                       "RLIMIT_NOFILE 64 (hard) is under the "), std::string::npos) << c.err;

  std::string mark = Cluster::dir() + "/started-despite-preflight";
  args = common;
  args.insert(args.end(), {"-np", "6", "touch", mark});
  auto l = hvdrun(args, 60);
  EXPECT_EQ(l.exit_code, 3) << l.err;
  EXPECT_NE(l.err.find("hvdrun: the pre-flight check failed on 2 of 3 host(s); nothing was started on any host"),
            std::string::npos) << l.err;
  EXPECT_EQ(l.out, "");  // no table: the lines say it
  EXPECT_FALSE(std::filesystem::exists(mark));
  EXPECT_TRUE(wait_until([] { return leftovers().empty(); }, 10)) << leftovers();
}

TEST(Cluster, PreflightWarningsLetTheJobRunAndNoPreflightSkipsTheCheck) {
  REQUIRE_CLUSTER();
  std::string wrapper = differing_hvdrun();
  // Another version that speaks the protocol, and a Python command: the table, exit 0.
  auto c = hvdrun({"--check", "-H", "h1:1,h2:1", "--remote-hvdrun", wrapper, "python3", "-c", "pass"}, 60);
  EXPECT_EQ(c.exit_code, 0) << c.err;
  std::string h1 = row_of(c.out, "h1"), h2 = row_of(c.out, "h2");
  EXPECT_NE(h1.find(" no-torch "), std::string::npos) << c.out;  // (the Python of the workers' PATH)
  EXPECT_NE(h2.find(" no-torch "), std::string::npos) << c.out;
  EXPECT_NE(h2.find(" 9.9.9* "), std::string::npos) << c.out;
  auto o = hvdrun({"-np", "2", "-H", "h1:1,h2:1", "--remote-hvdrun", wrapper, "sh", "-c", "echo ran $HOROVOD_RANK"}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.err.find("hvdrun: warning: pre-flight: h2: hvdrun 9.9.9, this one "), std::string::npos) << o.err;
  EXPECT_NE(o.out.find("[1]<stdout>:ran 1\n"), std::string::npos) << o.out;
  // --no-preflight: ib0 named and missing everywhere, and the job runs (it does not use it).
  auto n = hvdrun({"-np", "2", "-H", "h3:1,h4:1", "--no-preflight", "-x", "NCCL_SOCKET_IFNAME=ib0", "true"}, 60);
  EXPECT_EQ(n.exit_code, 0) << n.err;
  EXPECT_EQ(n.err.find("pre-flight"), std::string::npos) << n.err;
}
