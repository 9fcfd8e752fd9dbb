// A host's facts (launcher/host_facts.cc) from a /proc and /sys tree the test makes (a GPU
// host with two GPUs on two NUMA nodes, interfaces up and down), and the Python probe
// against stand-in interpreters.
#include "launcher/host_facts.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "hvdrun_version.h"
#include "launcher/agent_wire.h"

namespace hvdrun {
namespace {

namespace fs = std::filesystem;

struct Tree {
  std::string root;
  Tree() {
    char t[] = "/tmp/hvdrun-facts-XXXXXX";
    root = mkdtemp(t);
  }
  ~Tree() { fs::remove_all(root); }
  std::string put(const std::string& path, const std::string& text, mode_t mode = 0644) const {
    fs::create_directories(fs::path(root + path).parent_path());
    std::ofstream(root + path) << text;
    chmod((root + path).c_str(), mode);
    return root + path;
  }
};

void gpu(const Tree& t, const std::string& bus_upper, const std::string& bus, const std::string& numa) {
  t.put("/proc/driver/nvidia/gpus/" + bus_upper + "/information",
        "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 16\nGPU UUID: \t GPU-1\nBus Location: \t " + bus_upper +
            "\nDevice Minor: \t 0\n");
  t.put("/sys/bus/pci/devices/" + bus + "/numa_node", numa + "\n");
}

TEST(HostFacts, GpuHostFromProcAndSysfs) {
  Tree t;
  t.put("/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build  (dvs-builder@U16)\n"
        "GCC version:  gcc version 12.2.0\n");
  gpu(t, "0000:9A:00.0", "0000:9a:00.0", "1");
  gpu(t, "0000:19:00.0", "0000:19:00.0", "0");
  auto f = collect_host_facts(t.root);
  EXPECT_EQ(f.gpu_driver, "535.104.05");
  ASSERT_EQ(f.gpus.size(), 2u);
  EXPECT_EQ(f.gpus[0], (GpuFacts{"NVIDIA H100 80GB HBM3", "0000:19:00.0", 0}));
  EXPECT_EQ(f.gpus[1], (GpuFacts{"NVIDIA H100 80GB HBM3", "0000:9a:00.0", 1}));
}

TEST(HostFacts, NoNvidiaNoGpusAndAnUnknownNumaNode) {
  Tree t;
  EXPECT_TRUE(collect_host_facts(t.root).gpus.empty());
  EXPECT_EQ(collect_host_facts(t.root).gpu_driver, "");
  t.put("/proc/driver/nvidia/gpus/0000:01:00.0/information", "Model: \t\t Tesla T4\n");  // no sysfs entry
  auto f = collect_host_facts(t.root);
  ASSERT_EQ(f.gpus.size(), 1u);
  EXPECT_EQ(f.gpus[0], (GpuFacts{"Tesla T4", "0000:01:00.0", -1}));
}

TEST(HostFacts, InterfacesUpByTheirFlagsAndOperstate) {
  Tree t;
  t.put("/sys/class/net/eth0/flags", "0x1003\n");
  t.put("/sys/class/net/eth0/operstate", "up\n");
  t.put("/sys/class/net/ib0/flags", "0x1002\n");  // administratively down
  t.put("/sys/class/net/ib0/operstate", "down\n");
  t.put("/sys/class/net/ib1/flags", "0x1003\n");  // up, but no carrier
  t.put("/sys/class/net/ib1/operstate", "down\n");
  t.put("/sys/class/net/lo/flags", "0x9\n");
  t.put("/sys/class/net/lo/operstate", "unknown\n");
  auto f = collect_host_facts(t.root);
  EXPECT_EQ(f.ifaces, (std::vector<IfaceFacts>{{"eth0", true}, {"ib0", false}, {"ib1", false}, {"lo", true}}));
}

TEST(HostFacts, VersionProtocolLimitsShmAndClock) {
  Tree t;
  EXPECT_EQ(collect_host_facts(t.root).shm_free, -1);  // no dev/shm under the root
  fs::create_directories(t.root + "/dev/shm");
  auto f = collect_host_facts(t.root);
  EXPECT_EQ(f.version, HVDRUN_VERSION_STRING);
  EXPECT_EQ(f.protocol, agentwire::kProtocol);
  EXPECT_EQ(f.build.rfind("tcp shm", 0), 0u) << f.build;
  EXPECT_GT(f.shm_free, 0);
  rlimit rl{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  EXPECT_EQ(f.nofile, rl.rlim_max == RLIM_INFINITY ? -1 : static_cast<long long>(rl.rlim_max));
  EXPECT_GT(f.clock, 1.7e9);
}

TEST(HostFacts, RunsPythonByTheProgramsName) {
  EXPECT_TRUE(runs_python({"python3", "train.py"}));
  EXPECT_TRUE(runs_python({"/venv/bin/python3.11", "-m", "x"}));
  EXPECT_FALSE(runs_python({"torchrun", "train.py"}));
  EXPECT_FALSE(runs_python({}));
}

TEST(HostFacts, PythonProbeReadsTorchsVersionFileWithoutImportingIt) {
  Tree t;
  // A torch whose __init__ would fail if imported: the probe only reads version.py.
  t.put("/site/torch/__init__.py", "raise SystemExit('imported')\n");
  t.put("/site/torch/version.py", "from typing import Optional\n__version__ = '2.3.1+cu121'\ndebug = False\n"
                                  "cuda: Optional[str] = '12.1'\n");
  std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "PYTHONPATH=" + t.root + "/site"};
  auto p = probe_python_facts("python3", env, 30);
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.torch, "2.3.1+cu121");
  EXPECT_EQ(p.torch_cuda, "12.1");
  EXPECT_EQ(std::count(p.python.begin(), p.python.end(), '.'), 2) << p.python;
  t.put("/site/torch/version.py", "__version__ = '2.3.1'\ncuda = None\n");
  p = probe_python_facts("python3", env, 30);
  EXPECT_EQ(p.torch, "2.3.1");
  EXPECT_EQ(p.torch_cuda, "");
}

TEST(HostFacts, PythonProbeFailuresSayWhy) {
  Tree t;
  t.put("/bin/failing", "#!/bin/sh\necho 'boom' >&2\nexit 3\n", 0755);
  t.put("/bin/silent", "#!/bin/sh\nexec /bin/sleep 30\n", 0755);
  std::vector<std::string> env = {"PATH=" + t.root + "/bin"};
  EXPECT_EQ(probe_python_facts("failing", env, 30).error, "failing failed: boom");
  EXPECT_EQ(probe_python_facts("silent", env, 0.3).error, "silent did not answer within 0.3 s");
  auto missing = probe_python_facts("python-nowhere", env, 30);
  EXPECT_NE(missing.error.find("python-nowhere"), std::string::npos) << missing.error;
  EXPECT_EQ(missing.python, "");
}

// Waits (at most 30 s) for `path` to exist.
bool appears(const std::string& path) {
  for (int i = 0; i < 3000; ++i) {
    if (fs::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The background probe: the constructor returns with the probe still running (it answers
// only once the test says so), and its facts come later, on the probe's thread.
TEST(PythonProbe, AnswersInTheBackgroundAfterTheConstructorReturned) {
  Tree t;
  t.put("/bin/python3", "#!/bin/sh\nfor i in $(seq 3000); do [ -e " + t.root + "/go ] && break; sleep 0.01; done\n"
                        "echo 3.9.9; echo 1.0; echo\n", 0755);
  std::promise<PythonFacts> got;
  int calls = 0;
  PythonProbe probe("python3", {"PATH=" + t.root + "/bin:/usr/bin:/bin"}, 60, [&](const PythonFacts& p) {
    ++calls;
    got.set_value(p);
  });
  auto facts = got.get_future();
  EXPECT_EQ(facts.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "answered before it was let";
  t.put("/go", "");
  ASSERT_EQ(facts.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(facts.get(), (PythonFacts{"3.9.9", "1.0", "", ""}));
  probe.stop();
  EXPECT_EQ(calls, 1);
}

// A probe that never answers: stop() ends it (killed, no facts), long before its time-out.
TEST(PythonProbe, StopEndsAHungProbeWithoutFacts) {
  Tree t;
  t.put("/bin/python3", "#!/bin/sh\necho $$ > " + t.root + "/pid.tmp; mv " + t.root + "/pid.tmp " + t.root +
                            "/pid\nexec sleep 600\n", 0755);
  int calls = 0;
  PythonProbe probe("python3", {"PATH=" + t.root + "/bin:/usr/bin:/bin"}, 600, [&](const PythonFacts&) { ++calls; });
  ASSERT_TRUE(appears(t.root + "/pid"));
  pid_t pid = 0;
  std::ifstream(t.root + "/pid") >> pid;
  ASSERT_GT(pid, 0);
  auto stopped = std::async(std::launch::async, [&probe] { probe.stop(); });
  ASSERT_EQ(stopped.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "stop() waited for the probe";
  EXPECT_EQ(calls, 0);
  // Killed, and left to its parent (here, the test) to reap.
  int st = 0;
  pid_t r = 0;
  for (int i = 0; i < 3000 && (r = waitpid(pid, &st, WNOHANG)) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(r, pid) << "the probe still runs";
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

}  // namespace
}  // namespace hvdrun
