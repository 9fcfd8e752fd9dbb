// A job from options to exit code: the plan (plan.h; --dry-run prints it), then the launch.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/options.h"
#include "launcher/plan.h"

namespace hvdrun {

// Runs the job; returns hvdrun's exit code. Errors are printed to stderr.
int run_job(const LaunchOptions& opts, char** envp);

}  // namespace hvdrun
