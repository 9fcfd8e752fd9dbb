// One host made ready for its ranks before any of them is spawned, the same on hvdrun's
// machine (job.cc, for the ranks that run there) and in every remote agent
// (remote_agent.cc, after it has entered the job's working directory): the program
// resolved with the workers' PATH, the process budget checked, the watchdog forked.
//
// The order, one for both: the program first, then the budget, then the watchdog. A
// missing or mistyped command is the likelier mistake, and its error ("NAME: command not
// found", exit 127, as a shell says it) is the one the user has to fix whatever the limits
// are: with the budget first, a user would raise `ulimit -n` only to meet it next. Both
// checks start nothing; what starts a process (the watchdog, and on hvdrun's machine the
// --horovod-compat Python probe) comes after them. (hvdrun used to check the budget first
// and its agents the program first.)
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/budget.h"
#include "launcher/placement.h"
#include "launcher/watchdog.h"

namespace hvdrun {

struct HostNeed {
  std::string program;  // argv[0] as the user wrote it; "" when no rank runs on this host
  std::string path;     // the workers' PATH ("": execvp's default)
  BudgetNeed budget;    // what the job needs of this host
  std::string bind_to = "none";  // --bind-to, for budget.local_ranks ranks (placement.h)
};

// The checks alone, against `have`: the program's path ("" when need.program is), or the
// first error (its kind decides hvdrun's exit code).
Result<std::string> check_host(const HostNeed& need, const ProcessBudget& have);

struct PreparedHost {
  std::string exe;    // the program's path ("" when no rank runs here)
  Watchdog watchdog;  // forked, watching nothing yet
  std::vector<RankPlacement> placement;  // each local rank's CPUs, in local rank order
};

// The local ranks' placement on this machine (its /sys, the CPUs hvdrun may use): an
// explicit binding the host cannot give (--bind-to gpu without a GPU) is an error.
Result<std::vector<RankPlacement>> place_on_this_host(const std::string& bind_to, long long local_ranks);

// check_host against this machine's budget, the placement, then the watchdog (`kill_grace`: its wait
// between SIGTERM and SIGKILL).
Result<PreparedHost> prepare_host(const HostNeed& need, double kill_grace);

// PATH's value in a worker's environment ("K=V" strings); "" when it has none.
std::string path_in(const std::vector<std::string>& env);

}  // namespace hvdrun
