// A job from options to exit code: hosts -> ranks -> plan (--dry-run) or launch.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/options.h"
#include "launcher/rank_assignment.h"
#include "launcher/worker_env.h"

namespace hvdrun {

// Exit codes of hvdrun itself (a worker's failure gives that worker's code).
namespace exit_code {
constexpr int kUsage = 2;
constexpr int kLaunchFailed = 3;   // could not start the workers (fork, pipe, remote host)
constexpr int kStartTimeout = 4;   // not every rank reached the rendezvous in time
constexpr int kNotExecutable = 126;
constexpr int kNotFound = 127;
}  // namespace exit_code

struct JobPlan {
  std::vector<HostSlots> hosts;
  std::vector<RankInfo> ranks;
  std::vector<EnvOverride> env_overrides;
};

// Hosts, host file and -np into a plan. Pure except for reading the host file.
Result<JobPlan> make_plan(const LaunchOptions& opts, const std::map<std::string, std::string>& launcher_env);

// One JSON object per rank, one per line.
std::string dry_run_text(const JobPlan& plan, const std::vector<std::string>& command);

// Runs the job; returns hvdrun's exit code. Errors are printed to stderr.
int run_job(const LaunchOptions& opts, char** envp);

}  // namespace hvdrun
