// This host's processors and GPUs as Linux's sysfs shows them, read under an injectable
// root (tests build their own trees): every online CPU with its package (socket), core and
// NUMA node; every NVIDIA GPU with its PCI address and NUMA node, read as NCCL reads it
// (/sys/bus/pci/devices/<address>/numa_node), in PCI address order (CUDA_DEVICE_ORDER=
// PCI_BUS_ID). What the placement (placement.h) binds ranks to.
#pragma once

#include <string>
#include <vector>

namespace hvdrun {

struct Cpu {
  int id = 0;
  int package = 0;  // physical_package_id (a socket)
  int core = 0;     // core_id, unique within its package (its hyperthreads share it)
  int node = 0;     // NUMA node (0 where the kernel shows none)
};

struct Gpu {
  std::string pci;  // "0000:3b:00.0"
  int node = -1;    // NUMA node; -1: the kernel does not say
};

struct Topology {
  std::vector<Cpu> cpus;  // by id; only those this process may run on
  std::vector<Gpu> gpus;  // by PCI address
};

// The topology under `sysfs_root` ("/sys"), restricted to `allowed` CPU ids (empty: all).
// Files that are missing read as one package, one NUMA node, a core per CPU.
Topology read_topology(const std::string& sysfs_root, const std::vector<int>& allowed);

// The CPUs this process may run on (sched_getaffinity).
std::vector<int> allowed_cpus();

}  // namespace hvdrun
