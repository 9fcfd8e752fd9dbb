// Horovod Elastic's flags (horovod/runner/launch.py's "elastic arguments" and
// --host-discovery-script) and torchrun's --max-restarts: the CLI11 spec, their values
// checked against each other and -np, and the one-line summary --dry-run and --verbose
// print. Part of parse_command_line (options.cc). Pure: no I/O.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace CLI {
class App;
}

namespace hvdrun {

struct ElasticOptions {
  bool enabled = false;            // --min-np, --max-np or --host-discovery-script given
  int min_np = 0;                  // --min-np, default -np
  int max_np = 0;                  // --max-np; 0: unbounded (Horovod's code, not its docs)
  int slots_per_host = 0;          // --slots-per-host; 0: not given (a bare discovered host: 1)
  std::string discovery_script;    // --host-discovery-script; "": the fixed -H/--hostfile list
  double timeout = 600;            // --elastic-timeout, else HVDRUN_ELASTIC_TIMEOUT / HOROVOD_ELASTIC_TIMEOUT
  std::optional<int> reset_limit;  // --reset-limit; none: unlimited
  std::optional<std::pair<int, int>> cooldown;  // --blacklist-cooldown-range MIN MAX; none: for good
  double discovery_interval = 1;   // HVDRUN_DISCOVERY_INTERVAL
  double discovery_timeout = 30;   // HVDRUN_DISCOVERY_TIMEOUT: a script running longer is killed
  int max_restarts = 0;            // --max-restarts (torchrun's): restarts of the whole job
};

// The flags as CLI11 binds them (text, checked in resolve_elastic).
struct ElasticFlagValues {
  std::string min_np, max_np, slots_per_host, discovery_script, timeout, reset_limit, max_restarts;
  std::vector<std::string> cooldown_range;
};

// Adds the flags to `app` (group "Elastic"), bound to `v`.
void add_elastic_flags(CLI::App& app, ElasticFlagValues& v);

// The flags checked: numbers in range, min <= max, -np within [min, max], the cooldown
// range Horovod's (1 <= MIN <= MAX <= 3600), a fixed host list of at least two hosts for
// fault tolerance without discovery (`fixed_hosts`: the hosts -H/--hostfile name, -1 when
// unknown here), --max-restarts not with the elastic flags. `np`: -np, 0 when not given.
Result<ElasticOptions> resolve_elastic(const CLI::App& app, const ElasticFlagValues& v, int np, int fixed_hosts);

// "elastic: min-np 2, max-np unbounded, discovery 'd.sh' every 1 s (killed after 30 s), ..."
// (one line, no newline); "" when neither elastic nor --max-restarts.
std::string elastic_settings_text(const ElasticOptions& e);

}  // namespace hvdrun
