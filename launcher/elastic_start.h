// An elastic job's first round: with --host-discovery-script, the script run once (its
// failure, a bad line or a hang ends the job before anything starts), the hosts it lists
// ranked (elastic_membership.h) up to --max-np, and the --min-np check.
#pragma once

#include "launcher/options.h"

namespace hvdrun {

// `opts` with -H and -np those of the first round when it is an elastic job with a
// discovery script; `opts` itself otherwise.
Result<LaunchOptions> with_discovered_hosts(const LaunchOptions& opts);

}  // namespace hvdrun
