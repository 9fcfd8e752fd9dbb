// A job from options to exit code: the plan (plan.h; --dry-run prints it), then the launch.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/addressing.h"
#include "launcher/budget.h"
#include "launcher/options.h"
#include "launcher/plan.h"
#include "launcher/worker_env.h"

namespace hvdrun {

// Runs the job; returns hvdrun's exit code. Errors are printed to stderr.
int run_job(const LaunchOptions& opts, char** envp);

// Steps of run_job that decide without doing (job_test.cc tests them alone).

// The hosts with ranks, in order: this machine's ranks run here, the others' through an
// agent each. With srun every node's do, this one's included.
struct JobHosts {
  std::vector<std::string> remote_names;
  std::map<std::string, int> remote_index;  // host -> index in remote_names
  bool any_local = false;
};
JobHosts split_hosts(const JobPlan& plan);
// What the job needs of this machine's descriptors and processes (budget.h).
BudgetNeed budget_need(const JobPlan& plan, const JobHosts& hosts);
// The environment of the ranks on `host`: `base` with the addresses they use there.
JobEnv env_of_host(const JobEnv& base, const Addressing& addressing, const std::string& host);
// This executable's path (for the agents on other hosts, and the compat shim beside it).
std::string self_exe();
// ~/.ssh: $HOME's, else the user's home directory's.
std::string ssh_dir();
// --dry-run's "bind" of each rank: this machine's as placed here (placement.h); another
// host's is decided there, from its own topology.
Result<std::map<int, std::string>> dry_run_binding(const JobPlan& plan, const std::string& bind_to);

}  // namespace hvdrun
