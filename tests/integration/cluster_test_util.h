// The cluster tests' shared parts: the test hosts (network namespaces with their own sshd,
// tests/cluster/cluster.sh) brought up once for the binary (Cluster, registered in
// cluster_test.cc), hvdrun run with their HOME, and what is left running on them.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
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
#include <functional>

namespace cluster_test {

using namespace testing_hvdrun;

inline const std::string kHvdrun = HVDRUN_BIN;
inline const std::string kColl = COLL_WORKER_BIN;
inline const std::string kCluster = CLUSTER_SCRIPT;
constexpr int kHosts = 4;

// Runs a shell command with a deadline; its stdout.
inline std::string sh(const std::string& cmd, double seconds = 30) {
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
    // One user of the test hosts at a time on this machine (their names and subnet are
    // fixed): another ctest run, the chaos driver and the Horovod tests take the same lock.
    if (!take_cluster_lock(200)) {
      failed_ = "the cluster lock /tmp/hvdrun-cluster.lock was held by another run for 200 s";
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
    if (lock_fd_ >= 0) close(lock_fd_);  // releases the lock
    lock_fd_ = -1;
  }
  static const std::string& skip() { return skip_; }
  static const std::string& failed() { return failed_; }
  static const std::string& dir() { return dir_; }
  static std::string home() { return dir_ + "/home"; }
  static const std::string& netns(const std::string& host) { return netns_[host]; }

 private:
  static bool take_cluster_lock(int seconds) {
    lock_fd_ = open("/tmp/hvdrun-cluster.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd_ < 0) return false;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling a lock, not ordering events
    }
    return true;
  }
  static inline int lock_fd_ = -1;
  static inline std::string skip_, failed_, dir_;
  static inline std::map<std::string, std::string> netns_;
};

#define REQUIRE_CLUSTER()                                                                \
  if (!Cluster::failed().empty()) FAIL() << Cluster::failed();                           \
  if (!Cluster::skip().empty()) GTEST_SKIP() << "cluster tests skipped: " << Cluster::skip()

inline Outcome hvdrun(std::vector<std::string> args, double seconds = 90, std::map<std::string, std::string> env = {}) {
  args.insert(args.begin(), kHvdrun);
  env.emplace("HOME", Cluster::home());
  return run(args, seconds, env);
}

// Processes other than sshd in the test hosts' namespaces (and the given local pids).
inline std::string leftovers() {
  return sh("for n in $(seq 1 " + std::to_string(kHosts) +
            "); do ip netns pids hvdh$n; done | xargs -r ps -o pid=,comm= -p | grep -v ' sshd$' || true");
}

inline bool wait_until(const std::function<bool()>& pred, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

inline std::string openssh_command() {
  std::string d = Cluster::home() + "/.ssh";
  return "ssh -F " + d + "/config -i " + d + "/id_ed25519 -o UserKnownHostsFile=" + d +
         "/known_hosts -o StrictHostKeyChecking=accept-new -o BatchMode=yes";
}

}  // namespace cluster_test
