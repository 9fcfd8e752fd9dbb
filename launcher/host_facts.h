// What a host is, for the pre-flight check (preflight.h): hvdrun's version and build, the
// GPUs, the network interfaces, /dev/shm, the process limits, the clock, and (for a Python
// command) that Python's and its torch's versions. Each agent collects its host's and sends
// them in its hello (the Python facts with its kReady: they need the job's command and
// PATH); hvdrun collects its own machine's the same way.
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace hvdrun {

struct GpuFacts {
  std::string model;  // "NVIDIA H100 80GB HBM3"
  std::string bus;    // PCI address, lower case: "0000:19:00.0"
  int numa_node = -1;  // -1: unknown (a single-node host says -1 too)
  bool operator==(const GpuFacts&) const = default;
};

struct IfaceFacts {
  std::string name;
  bool up = false;  // IFF_UP and an operstate other than down
  bool operator==(const IfaceFacts&) const = default;
};

struct HostFacts {
  std::string version;  // HVDRUN_VERSION_STRING
  int protocol = 0;     // agentwire::kProtocol: equal ones can talk
  std::string build;    // "tcp shm", "tcp shm cuda-12.2 nccl-2.18.3"
  std::string gpu_driver;  // NVIDIA's kernel module, "535.104.05"; "": none
  std::vector<GpuFacts> gpus;
  std::vector<IfaceFacts> ifaces;  // every interface, with or without an address
  long long shm_free = -1;         // bytes free in /dev/shm; -1: no /dev/shm
  long long nofile = -1;           // RLIMIT_NOFILE hard limit (hvdrun raises the soft one to it); -1: unlimited
  long long nproc = -1;            // RLIMIT_NPROC soft limit; -1: unlimited
  double clock = 0;                // the host's wall clock when it collected them (s since the epoch)
  bool operator==(const HostFacts&) const = default;
};

// The Python a Python command runs, as that host's PATH finds it.
struct PythonFacts {
  std::string python;      // "3.11.2"
  std::string torch;       // "2.1.0"; "": no torch importable
  std::string torch_cuda;  // the CUDA torch was built for, "12.1"; "": a CPU build or no torch
  std::string error;       // the probe failed (its one line); the rest is empty
  bool operator==(const PythonFacts&) const = default;
};

// The facts of the host whose /proc and /sys lie under `root` ("" for this one; tests make
// a tree there). The limits and the clock are this process's own.
HostFacts collect_host_facts(const std::string& root = "");

// hvdrun's build as HostFacts::build says it.
std::string build_facts();

// Whether `command` runs Python (its program is named python*), as probe_python decides.
bool runs_python(const std::vector<std::string>& command);

// `python` (resolved with PATH of `env`, "K=V" strings) asked for its version and its
// torch's (read from torch/version.py, not imported: milliseconds, not seconds). Never
// fails: a probe that cannot run or does not answer within `timeout_s` says so in .error.
PythonFacts probe_python_facts(const std::string& python, const std::vector<std::string>& env, double timeout_s);

// How long a probe may take, at most (the start time-out, when shorter, for kReady's).
inline constexpr double kPythonProbeTimeout = 5;

// probe_python_facts in the background, off the job's start: the probe is spawned before
// the constructor returns (an agent's loop started next counts it among the children it
// had before its workers, never one of theirs), and `done` gets its facts on a thread of
// its own once it answers within `timeout_s` (or says why not). stop() ends a probe still
// running (killed; `done` is not called) and waits for that thread, which then has nothing
// left to wait for: the job's end is never held by a probe.
class PythonProbe {
 public:
  PythonProbe(const std::string& python, const std::vector<std::string>& env, double timeout_s,
              std::function<void(const PythonFacts&)> done);
  ~PythonProbe() { stop(); }
  PythonProbe(const PythonProbe&) = delete;
  PythonProbe& operator=(const PythonProbe&) = delete;
  void stop();

 private:
  UniqueFd cancel_rd_, cancel_wr_;
  std::thread thread_;
};

}  // namespace hvdrun
