#include "launcher/elastic_options.h"

#include <CLI/CLI.hpp>

#include <cstdio>

#include "common/strings.h"
#include "common/tunables.h"
#include "launcher/exit_status.h"

namespace hvdrun {

void add_elastic_flags(CLI::App& app, ElasticFlagValues& v) {
  const char* g = "Elastic";
  app.add_option("--min-np,--min-num-proc", v.min_np,
                 "Elastic: fewest ranks to train with; below it the job waits up to --elastic-timeout for hosts "
                 "(default: -np)")
      ->type_name("N")->group(g);
  app.add_option("--max-np,--max-num-proc", v.max_np, "Elastic: most ranks; hosts beyond it wait (default: unbounded)")
      ->type_name("N")->group(g);
  app.add_option("--slots-per-host", v.slots_per_host,
                 "Elastic: slots of a host the discovery script prints without ':slots' (default: 1)")
      ->type_name("N")->group(g);
  app.add_option("--host-discovery-script", v.discovery_script,
                 "Elastic: a program printing the available hosts, one 'host[:slots]' a line; run every second "
                 "(HVDRUN_DISCOVERY_INTERVAL); new hosts take ranks in the order of its lines")
      ->type_name("FILE")->group(g);
  app.add_option("--elastic-timeout", v.timeout,
                 "Elastic: seconds to wait for --min-np slots after a reset (default 600, HOROVOD_ELASTIC_TIMEOUT)")
      ->type_name("SECONDS")->group(g);
  app.add_option("--reset-limit", v.reset_limit, "Elastic: resets after which the job ends (default: unlimited)")
      ->type_name("N")->group(g);
  app.add_option("--blacklist-cooldown-range", v.cooldown_range,
                 "Elastic: a failed host is blacklisted for MIN*2^n..MAX seconds (its n-th failure), then taken "
                 "back if discovery still lists it (default: for good)")
      ->expected(2)->allow_extra_args(false)->group(g);
  app.add_option("--max-restarts", v.max_restarts,
                 "As torchrun: restart every worker (new RANK/WORLD_SIZE, HVDRUN_RESTART_COUNT) up to N times "
                 "after a failure; for programs without the elastic API (default 0)")
      ->type_name("N")->group(g);
}

namespace {

bool given(const CLI::App& app, const char* name) { return app.get_option(name)->count() > 0; }

// An integer flag, when given, into `out`.
Status take_int(const std::string& text, const char* name, long long min, long long max, int& out) {
  if (text.empty()) return {};
  auto n = parse_int(text, name, min, max);
  if (!n) return n.error();
  out = static_cast<int>(*n);
  return {};
}

Status take_numbers(const ElasticFlagValues& v, ElasticOptions& e) {
  int reset = -1;
  for (auto [text, name, min, out] :
       {std::tuple{&v.min_np, "--min-np", 1LL, &e.min_np}, std::tuple{&v.max_np, "--max-np", 1LL, &e.max_np},
        std::tuple{&v.slots_per_host, "--slots-per-host", 1LL, &e.slots_per_host},
        std::tuple{&v.reset_limit, "--reset-limit", 0LL, &reset},
        std::tuple{&v.max_restarts, "--max-restarts", 0LL, &e.max_restarts}})
    if (auto s = take_int(*text, name, min, 1 << 24, *out); !s) return s;
  if (reset >= 0) e.reset_limit = reset;
  std::string timeout = v.timeout.empty() ? tunable_string("HVDRUN_ELASTIC_TIMEOUT") : v.timeout;
  auto t = parse_double(timeout, v.timeout.empty() ? "HVDRUN_ELASTIC_TIMEOUT" : "--elastic-timeout", 0.001, 1e7);
  if (!t) return t.error();
  e.timeout = *t;
  e.discovery_interval = tunable_double("HVDRUN_DISCOVERY_INTERVAL");
  e.discovery_timeout = tunable_double("HVDRUN_DISCOVERY_TIMEOUT");
  if (v.cooldown_range.size() == 2) {
    auto lo = parse_int(v.cooldown_range[0], "--blacklist-cooldown-range MIN", 1, 3600);
    if (!lo) return lo.error();
    auto hi = parse_int(v.cooldown_range[1], "--blacklist-cooldown-range MAX", *lo, 3600);
    if (!hi) return hi.error();
    e.cooldown = std::make_pair(static_cast<int>(*lo), static_cast<int>(*hi));
  }
  return {};
}

Error usage(const std::string& what) { return error_of(ErrorKind::kUsage, what); }

// Elastic mode's flags against each other, -np and the hosts.
Status check_elastic(const CLI::App& app, ElasticOptions& e, int np, int fixed_hosts) {
  if (e.max_restarts > 0)
    return usage("--max-restarts restarts a whole job of fixed size; elastic jobs (--min-np, --max-np, "
                 "--host-discovery-script) reset instead: give one or the other");
  if (given(app, "--host-discovery-script") && e.discovery_script.empty())
    return usage("--host-discovery-script '': expected a program");
  if (e.min_np == 0) e.min_np = np;
  if (e.min_np == 0)
    return usage("elastic: give --min-np or -np (the fewest ranks to train with)");
  if (e.max_np > 0 && e.max_np < e.min_np)
    return usage("--max-np " + std::to_string(e.max_np) + " is below --min-np " + std::to_string(e.min_np));
  if (np > 0 && (np < e.min_np || (e.max_np > 0 && np > e.max_np)))
    return usage("-np " + std::to_string(np) + " is outside --min-np " + std::to_string(e.min_np) + " .. --max-np " +
                 (e.max_np > 0 ? std::to_string(e.max_np) : std::string("unbounded")));
  if (e.discovery_script.empty() && fixed_hosts >= 0 && fixed_hosts < 2)
    return usage("elastic without --host-discovery-script is fault tolerance over a fixed host list: give -H or "
                 "--hostfile with at least 2 hosts (as horovodrun)");
  return {};
}

}  // namespace

Result<ElasticOptions> resolve_elastic(const CLI::App& app, const ElasticFlagValues& v, int np, int fixed_hosts) {
  ElasticOptions e;
  if (auto s = take_numbers(v, e); !s) return s.error();
  e.discovery_script = v.discovery_script;
  e.enabled = given(app, "--min-np") || given(app, "--max-np") || given(app, "--host-discovery-script");
  if (!e.enabled) {
    for (const char* f : {"--slots-per-host", "--elastic-timeout", "--reset-limit", "--blacklist-cooldown-range"})
      if (given(app, f))
        return usage(std::string(f) + " is an elastic setting: give --min-np, --max-np or --host-discovery-script too");
    return e;
  }
  if (auto s = check_elastic(app, e, np, fixed_hosts); !s) return s.error();
  return e;
}

std::string elastic_settings_text(const ElasticOptions& e) {
  if (!e.enabled)
    return e.max_restarts > 0 ? "restarts: up to " + std::to_string(e.max_restarts) + " of the whole job" : "";
  auto num = [](double d) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", d);
    return std::string(b);
  };
  std::string s = "elastic: min-np " + std::to_string(e.min_np) + ", max-np " +
                  (e.max_np > 0 ? std::to_string(e.max_np) : std::string("unbounded")) + ", hosts ";
  if (e.discovery_script.empty())
    s += "fixed (-H/--hostfile)";
  else
    s += "from '" + printable(e.discovery_script) + "' every " + num(e.discovery_interval) + " s (killed after " +
         num(e.discovery_timeout) + " s), bare host " + std::to_string(e.slots_per_host > 0 ? e.slots_per_host : 1) +
         " slot(s)";
  s += ", elastic timeout " + num(e.timeout) + " s, reset limit " +
       (e.reset_limit ? std::to_string(*e.reset_limit) : std::string("none")) + ", blacklist " +
       (e.cooldown ? std::to_string(e.cooldown->first) + ".." + std::to_string(e.cooldown->second) + " s cooldown"
                   : std::string("for good"));
  return s;
}

}  // namespace hvdrun
