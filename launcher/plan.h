// A job's plan from the options and the launcher's environment (pure but for reading a
// host file): where the hosts come from, how agents are started there, which rank runs
// where. Everything that starts processes lives elsewhere.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/exit_status.h"
#include "launcher/hosts.h"
#include "launcher/options.h"
#include "launcher/rank_assignment.h"
#include "launcher/worker_env.h"

namespace hvdrun {

// How agents reach the hosts (--launcher; chosen from the other options when not given):
//   local:   every rank on this machine, no agent
//   ssh:     libssh, or the --ssh-command client, for hosts other than this machine
//   command: --launch-command's template ('kubectl exec -i {host} --'), likewise
//   slurm:   one `srun` step with one agent per node of the allocation (every node,
//            this one included)
enum class LauncherKind { kLocal, kSsh, kCommand, kSlurm };
Result<LauncherKind> parse_launcher_kind(const std::string& s);  // "" is not a kind
const char* launcher_kind_name(LauncherKind k);

struct JobPlan {
  LauncherKind launcher = LauncherKind::kLocal;
  std::vector<HostSlots> hosts;
  std::vector<RankInfo> ranks;
  std::vector<EnvOverride> env_overrides;
  std::string slurm_job_id;  // SLURM_JOB_ID, when inside an allocation
};

// Hosts come from -H, else --hostfile, else (inside a Slurm allocation, or with
// --launcher slurm) SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE, else this machine.
// -np defaults to SLURM_NTASKS inside an allocation, else every slot.
Result<JobPlan> make_plan(const LaunchOptions& opts, const std::map<std::string, std::string>& launcher_env);

// One JSON object per rank, one per line.
// `binding`: rank -> its "bind" text (job.cc places them); ranks not in it have none.
std::string dry_run_text(const JobPlan& plan, const std::vector<std::string>& command,
                         const std::map<int, std::string>& binding = {});

}  // namespace hvdrun
