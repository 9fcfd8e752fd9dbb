// The pre-flight policy (launcher/preflight.cc): every rule, on hosts that differ in one
// fact at a time from a reference host that passes.
#include "launcher/preflight.h"

#include <gtest/gtest.h>

#include "launcher/budget.h"

namespace hvdrun {
namespace {

PreflightJob job_of(std::vector<NamedIface> ifaces = {}) {
  PreflightJob j;
  j.version = "1.2.0";
  j.protocol = 3;
  j.ifaces = std::move(ifaces);
  return j;
}

// A host that passes every rule: same version and protocol, no GPU, eth0 and ib0 up with
// addresses, room everywhere, its clock on time.
PreflightHost good(const std::string& name, int slots = 2) {
  PreflightHost h;
  h.host = name;
  h.slots = slots;
  h.facts.version = "1.2.0";
  h.facts.protocol = 3;
  h.facts.build = "tcp shm";
  h.facts.ifaces = {{"eth0", true}, {"ib0", true}, {"lo", true}};
  h.addrs = {{"eth0", "10.0.0.1", false, 24}, {"ib0", "10.1.0.1", false, 24}, {"lo", "127.0.0.1", false, 8}};
  h.facts.shm_free = 8ll << 30;
  h.facts.nofile = 1 << 20;
  h.facts.nproc = -1;
  return h;
}

PythonFacts py(std::string python, std::string torch, std::string cuda) { return {python, torch, cuda, ""}; }

// The findings as "host column severity: text" lines.
std::vector<std::string> said(const std::vector<PreflightHost>& hosts, const PreflightJob& job = job_of()) {
  std::vector<std::string> out;
  for (const auto& f : check_preflight(hosts, job))
    out.push_back(f.host + " " + f.column + (f.severity == Finding::kError ? " error: " : " warning: ") + f.text);
  return out;
}

using Lines = std::vector<std::string>;

TEST(Preflight, AlikeHostsPass) {
  EXPECT_EQ(said({good("a"), good("b"), good("c")}, job_of({{"NCCL_SOCKET_IFNAME", "ib"}})), Lines{});
}

TEST(Preflight, AnotherProtocolIsAnErrorAnotherVersionAWarning) {
  auto old = good("b"), other = good("c");
  old.facts.version = "0.9.0";
  old.facts.protocol = 2;
  other.facts.version = "1.3.0";
  EXPECT_EQ(said({good("a"), old, other}),
            (Lines{"b hvdrun error: hvdrun 0.9.0 speaks agent protocol 2, this hvdrun 1.2.0 protocol 3: they cannot "
                   "talk; install the same version",
                   "c hvdrun warning: hvdrun 1.3.0, this one 1.2.0 (same protocol)"}));
}

TEST(Preflight, AnotherBuildIsAWarningAgainstTheFirstHost) {
  auto b = good("b");
  b.facts.build = "tcp shm cuda-12.2 nccl-2.18.3";
  EXPECT_EQ(said({good("a"), b}), Lines{"b build warning: hvdrun built with tcp shm cuda-12.2 nccl-2.18.3, on a with tcp shm"});
}

TEST(Preflight, NcclSocketIfnameMissingDownOrWithoutAddress) {
  auto missing = good("b"), down = good("c"), bare = good("d");
  missing.facts.ifaces = {{"eth0", true}, {"lo", true}};
  down.facts.ifaces[1].up = false;
  bare.addrs.erase(bare.addrs.begin() + 1);
  auto job = job_of({{"NCCL_SOCKET_IFNAME", "ib0"}});
  EXPECT_EQ(said({good("a"), missing, down, bare}, job),
            (Lines{"b ifaces error: NCCL_SOCKET_IFNAME=ib0: no such interface here (it has eth0, lo)",
                   "c ifaces error: NCCL_SOCKET_IFNAME=ib0: ib0 is down", "d ifaces error: NCCL_SOCKET_IFNAME=ib0: ib0 has no address"}));
}

TEST(Preflight, NcclNeedsOneUsableInterfaceOfThoseItNames) {
  auto b = good("b");
  b.facts.ifaces[1].up = false;  // ib0 down, eth0 up: NCCL takes eth0
  EXPECT_EQ(said({good("a"), b}, job_of({{"NCCL_SOCKET_IFNAME", "ib0,eth"}})), Lines{});
  EXPECT_EQ(said({good("a"), b}, job_of({{"NCCL_SOCKET_IFNAME", "=ib0"}})),
            Lines{"b ifaces error: NCCL_SOCKET_IFNAME==ib0: ib0 is down"});
}

TEST(Preflight, GlooAndNetworkInterfaceNeedEveryNameExactly) {
  auto b = good("b");
  b.facts.ifaces = {{"eth0", true}, {"ib0x", true}, {"lo", true}};
  EXPECT_EQ(said({good("a"), b}, job_of({{"GLOO_SOCKET_IFNAME", "eth0,ib0"}})),
            Lines{"b ifaces error: GLOO_SOCKET_IFNAME=eth0,ib0: no interface ib0 here (it has eth0, ib0x, lo)"});
  EXPECT_EQ(said({good("a"), b}, job_of({{"--network-interface", "ib0"}})),
            Lines{"b ifaces error: --network-interface ib0: no interface ib0 here (it has eth0, ib0x, lo)"});
}

TEST(Preflight, MatchingIfacesFollowsNcclsSyntax) {
  std::vector<IfaceFacts> ifs = {{"docker0", true}, {"eth0", true}, {"eth1", true}, {"ib0", true}, {"lo", true}};
  using V = std::vector<std::string>;
  EXPECT_EQ(matching_ifaces({"NCCL_SOCKET_IFNAME", "eth"}, ifs), (V{"eth0", "eth1"}));
  EXPECT_EQ(matching_ifaces({"NCCL_SOCKET_IFNAME", "=eth"}, ifs), V{});
  EXPECT_EQ(matching_ifaces({"NCCL_SOCKET_IFNAME", "=eth1,ib"}, ifs), V{"eth1"});  // '=': every name exact
  EXPECT_EQ(matching_ifaces({"NCCL_SOCKET_IFNAME", "=eth1,ib0"}, ifs), (V{"eth1", "ib0"}));
  EXPECT_EQ(matching_ifaces({"NCCL_SOCKET_IFNAME", "^docker,eth"}, ifs), V{"ib0"});
  EXPECT_EQ(matching_ifaces({"GLOO_SOCKET_IFNAME", "eth"}, ifs), V{});
  EXPECT_EQ(matching_ifaces({"GLOO_SOCKET_IFNAME", "eth1,ib0"}, ifs), (V{"eth1", "ib0"}));
}

TEST(Preflight, ExcludingEveryInterfaceIsAnError) {
  EXPECT_EQ(said({good("a")}, job_of({{"NCCL_SOCKET_IFNAME", "^eth,ib"}})),
            Lines{"a ifaces error: NCCL_SOCKET_IFNAME=^eth,ib: no such interface here (it has eth0, ib0, lo)"});
}

TEST(Preflight, FewerGpusThanRanksOnAGpuHostIsAWarningNoGpuIsNot) {
  auto a = good("a", 4), b = good("b", 4);
  a.facts.gpus = {{"H100", "0000:19:00.0", 0}, {"H100", "0000:3b:00.0", 0}, {"H100", "0000:9a:00.0", 1},
                  {"H100", "0000:bb:00.0", 1}};
  a.facts.gpu_driver = b.facts.gpu_driver = "535.104.05";
  b.facts.gpus = {a.facts.gpus[0], a.facts.gpus[1]};
  EXPECT_EQ(said({a, b}), Lines{"b gpus warning: 2 GPU(s) for 4 ranks"});
  EXPECT_EQ(said({good("c", 4)}), Lines{});
}

TEST(Preflight, AnotherGpuModelOrDriverIsAWarning) {
  auto a = good("a", 1), b = good("b", 1);
  a.facts.gpus = {{"NVIDIA H100", "0000:19:00.0", 0}};
  b.facts.gpus = {{"NVIDIA A100", "0000:19:00.0", 0}};
  a.facts.gpu_driver = "535.104.05";
  b.facts.gpu_driver = "550.54.14";
  EXPECT_EQ(said({a, b}), (Lines{"b gpus warning: GPU NVIDIA A100, on a NVIDIA H100",
                                 "b gpus warning: NVIDIA driver 550.54.14, on a 535.104.05"}));
}

TEST(Preflight, PythonAndTorchDifferencesAreWarningsAgainstTheFirstProbedHost) {
  auto a = good("a"), b = good("b"), c = good("c"), d = good("d"), e = good("e");
  for (auto* h : {&a, &b, &c, &d, &e}) h->has_python = true;
  a.python = py("3.11.2", "2.1.0", "12.1");
  b.python = py("3.11.2", "2.1.0", "12.1");
  c.python = py("3.10.12", "2.1.0", "12.1");
  d.python = py("3.11.2", "2.1.0", "");
  e.python = py("3.11.2", "", "");
  EXPECT_EQ(said({a, b, c, d, e}),
            (Lines{"c python warning: Python 3.10.12, torch 2.1.0 (CUDA 12.1); on a Python 3.11.2, torch 2.1.0 (CUDA 12.1)",
                   "d python warning: Python 3.11.2, torch 2.1.0 (CPU); on a Python 3.11.2, torch 2.1.0 (CUDA 12.1)",
                   "e python warning: Python 3.11.2, no torch; on a Python 3.11.2, torch 2.1.0 (CUDA 12.1)"}));
}

TEST(Preflight, AFailedPythonProbeIsAWarningAndNotTheReference) {
  auto a = good("a"), b = good("b"), c = good("c"), plain = good("p");
  a.has_python = b.has_python = c.has_python = true;
  a.python.error = "python3 did not answer within 5 s";
  b.python = py("3.11.2", "2.1.0", "12.1");
  c.python = py("3.11.2", "2.1.0", "12.1");
  EXPECT_EQ(said({a, b, c, plain}), Lines{"a python warning: cannot tell its Python: python3 did not answer within 5 s"});
}

TEST(Preflight, DescriptorAndProcessLimitsUnderTheRanksNeedAreErrors) {
  BudgetNeed need;
  need.local_ranks = 8;
  auto files = files_needed(need), tasks = tasks_needed(need);
  auto low = good("b", 8), just = good("c", 8), nproc = good("d", 8);
  low.facts.nofile = files - 1;
  just.facts.nofile = files;
  just.facts.nproc = tasks;
  nproc.facts.nproc = tasks - 1;
  EXPECT_EQ(said({good("a", 8), low, just, nproc}),
            (Lines{"b limits error: RLIMIT_NOFILE " + std::to_string(files - 1) + " (hard) is under the " +
                       std::to_string(files) + " descriptors its 8 ranks need",
                   "d limits error: RLIMIT_NPROC " + std::to_string(tasks - 1) + " is under the " + std::to_string(tasks) +
                       " processes its 8 ranks need"}));
}

TEST(Preflight, LittleOrNoSharedMemoryIsAWarningForSeveralRanksOnly) {
  auto small = good("b", 4), none = good("c", 2), single = good("d", 1);
  small.facts.shm_free = 64ll << 20;  // 4 ranks want 64 + 2 * 12 MiB
  none.facts.shm_free = -1;
  single.facts.shm_free = -1;
  EXPECT_EQ(said({good("a"), small, none, single}),
            (Lines{"b shm warning: /dev/shm has 64 MiB free, 4 ranks want 88 MiB",
                   "c shm warning: no /dev/shm: its ranks talk over TCP, NCCL fails"}));
}

TEST(Preflight, AClockMoreThanASecondOffIsAWarning) {
  auto fast = good("b"), close = good("c");
  fast.clock_offset = -2.5;
  close.clock_offset = 0.9;
  EXPECT_EQ(said({good("a"), fast, close}),
            Lines{"b clock warning: clock -2.5 s off hvdrun's (timelines and logs will not line up)"});
}

TEST(Preflight, LinesAreOnePerHostAndErrorsDecide) {
  auto b = good("b");
  b.facts.protocol = 2;
  b.facts.nofile = 1;
  b.clock_offset = 5;
  auto f = check_preflight({good("a"), b}, job_of({{"NCCL_SOCKET_IFNAME", "ib9"}}));
  EXPECT_FALSE(preflight_passes(f));
  auto errors = preflight_lines(f, Finding::kError);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0], "a: NCCL_SOCKET_IFNAME=ib9: no such interface here (it has eth0, ib0, lo)");
  EXPECT_EQ(errors[1].rfind("b: hvdrun 1.2.0 speaks agent protocol 2", 0), 0u) << errors[1];
  EXPECT_NE(errors[1].find("; NCCL_SOCKET_IFNAME=ib9: no such interface"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("; RLIMIT_NOFILE 1 (hard)"), std::string::npos) << errors[1];
  EXPECT_EQ(preflight_lines(f, Finding::kWarning), std::vector<std::string>{"b: clock +5.0 s off hvdrun's (timelines and logs will not line up)"});
  auto warned = good("b");
  warned.clock_offset = 5;
  EXPECT_TRUE(preflight_passes(check_preflight({good("a"), warned}, job_of())));
}

}  // namespace
}  // namespace hvdrun
