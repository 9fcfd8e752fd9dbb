// Runs --host-discovery-script once (the I/O beside elastic_policy.h's decisions): through
// /bin/sh -c, as Horovod does, in its own process group with every signal unblocked, stdin
// /dev/null, stderr hvdrun's; its stdout captured (at most kMaxDiscoveryOutput bytes). A
// script still running after `timeout` seconds is killed with its whole group.
#pragma once

#include <string>

#include "launcher/elastic_policy.h"

namespace hvdrun {

constexpr size_t kMaxDiscoveryOutput = 1u << 20;

struct DiscoveryOutput {
  DiscoveryRun run;  // timed_out, exit_code (parse_error left for the caller)
  std::string out;
};

Result<DiscoveryOutput> run_discovery_script(const std::string& script, double timeout);

// One run's output parsed and judged (elastic_policy.h's judge_discovery): the hosts it
// lists when the verdict is to use them.
struct DiscoveredHosts {
  DiscoveryVerdict verdict;
  std::vector<HostSlots> hosts;
};
DiscoveredHosts judge_discovery_output(const DiscoveryOutput& o, int bare_slots, const std::string& script,
                                       double timeout, bool first);

// The script run and judged as the first run (a failure is the job's end): the hosts it
// lists, `bare_slots` for a bare host. The error is one line naming the script.
Result<std::vector<HostSlots>> discover_hosts_once(const std::string& script, int bare_slots, double timeout);

}  // namespace hvdrun
