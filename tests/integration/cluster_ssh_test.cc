// Multi-host jobs on real sshd hosts (cluster_test.cc): the SSH connection (OpenSSH's
// client, ports, keys, host keys, the user's config, the agent), what a remote host lacks,
// and launch commands (kubectl exec, an ssh command) in its place.
#include "cluster_test_util.h"

using namespace testing_hvdrun;
using namespace cluster_test;

TEST(Cluster, ThroughTheOpenSshClient) {
  REQUIRE_CLUSTER();
  auto o = hvdrun({"-np", "4", "-H", "h1:2,h2:2", "--ssh-command", openssh_command(), kColl, "check"}, 180);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("rank 3 checked"), std::string::npos) << o.out;
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
