// Builds each worker's environment. Precedence, lowest first: hvdrun's defaults
// (PYTHONUNBUFFERED=1, NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME for the interface it
// chose), the user's environment (hvdrun's own, less BASH_FUNC_* and OLDPWD), the
// command line's flags (--nccl-debug, Horovod's tuning flags), -x; then the contract
// (HOROVOD_RANK..., torch.distributed's, HVDRUN_RENDEZVOUS_*; with --horovod, what
// horovodrun --gloo sets: HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT, HOROVOD_CONTROLLER=gloo,
// HOROVOD_CPU_OPERATIONS=gloo, HOROVOD_GLOO_IFACE), which nothing overrides.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "launcher/rank_assignment.h"

namespace hvdrun {

// What every worker of a job shares.
struct JobEnv {
  std::string master_addr;
  int master_port = 0;
  std::string rendezvous_addr;  // empty: no rendezvous variables
  int rendezvous_port = 0;
  std::string secret_hex;
  std::string iface;
  std::string nccl_debug;
  double start_timeout = 30;
  int horovod_port = 0;     // --horovod: the Horovod Gloo store's port (at rendezvous_addr); 0: none
  std::string gloo_iface;   // --horovod: HOROVOD_GLOO_IFACE ("" : unset)
  std::string python_path_prepend;  // --horovod-compat: put first on PYTHONPATH (after -x)
  std::map<std::string, std::string> flag_env;  // from command-line flags (--fusion-threshold-mb ...)
};

// One `-x NAME[=VALUE]`, already validated.
struct EnvOverride {
  std::string name;
  std::string value;
};

// Validates `-x` specs against the launcher's environment: `NAME` forwards NAME's current
// value (an error when unset), `NAME=VALUE` sets it.
Result<std::vector<EnvOverride>> parse_env_overrides(const std::vector<std::string>& specs,
                                                      const std::map<std::string, std::string>& launcher_env);

std::map<std::string, std::string> environ_to_map(char** envp);

// The full environment of one rank, as a sorted map.
std::map<std::string, std::string> build_worker_env(const std::map<std::string, std::string>& launcher_env,
                                                    const std::vector<EnvOverride>& overrides, const JobEnv& job,
                                                    const RankInfo& rank, int group_rank);

// What the workers see of tunable `env` (common/tunables.cc; our spelling when set, else
// Horovod's), from the launcher's environment and the overrides (-x, and the flags that
// set workers' variables, such as --timeline-filename); the table's default when neither
// sets it.
std::string worker_tunable(const std::map<std::string, std::string>& launcher_env,
                           const std::vector<EnvOverride>& overrides, std::string_view env);

std::vector<std::string> env_to_strings(const std::map<std::string, std::string>& env);

}  // namespace hvdrun
