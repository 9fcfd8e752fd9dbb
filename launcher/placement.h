// Where each rank of one host runs: the CPUs it is bound to, decided from the host's
// topology (topology.h) and the policy (--bind-to, or Horovod's --binding-args), as
// mpirun's --bind-to does. Pure: the tests hand it topologies they make.
//
//   none    no binding
//   core    local rank i: the i-th core (all its hardware threads), cores in (NUMA node,
//           package, core) order; refused when the host has more ranks than cores
//   socket  the package (socket) of share i: ranks spread evenly over the packages
//   numa    the same over NUMA nodes
//   gpu     the NUMA node of the rank's GPU (local rank i uses GPU i mod the GPU count,
//           as torch.cuda.set_device(hvd.local_rank()) does); refused without GPUs
//   auto    (the default) gpu when the host has a GPU for each rank, else core when the
//           ranks fit its cores, else none: oversubscribed ranks are left to the kernel
//           (bound, two ranks that share a core wait for each other at every step)
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/topology.h"

namespace hvdrun {

enum class BindTo { kAuto, kNone, kCore, kSocket, kNuma, kGpu };

// "auto", "none", "core", ... ; an error names the value and the choices.
Result<BindTo> parse_bind_to(const std::string& text, const std::string& what);
const char* bind_to_name(BindTo b);

// Horovod's --binding-args (passed to mpirun there): Open MPI's "--bind-to X" and
// "--map-by slot|core|socket|numa" act here; anything else is refused by name.
Result<BindTo> bind_to_of_binding_args(const std::string& args);

struct RankPlacement {
  std::vector<int> cpus;  // empty: not bound
  std::string what;       // "core 1", "numa 0 (GPU 0000:3b:00.0)", "none (oversubscribed)"
};

// "0-3,8,10-11" <-> {0,1,2,3,8,10,11} (the kernel's list format); a bad list parses as empty.
std::vector<int> parse_cpu_list(const std::string& text);
std::string cpu_list_text(const std::vector<int>& cpus);

// One placement per local rank, 0 .. local_size-1.
Result<std::vector<RankPlacement>> place_ranks(const Topology& topo, BindTo bind, int local_size);

}  // namespace hvdrun
