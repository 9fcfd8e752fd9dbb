#include "launcher/elastic_start.h"

#include "launcher/discovery_runner.h"
#include "launcher/elastic_membership.h"
#include "launcher/exit_status.h"

namespace hvdrun {

Result<LaunchOptions> with_discovered_hosts(const LaunchOptions& opts) {
  const ElasticOptions& e = opts.elastic;
  if (!e.enabled || e.discovery_script.empty()) return opts;
  auto hosts = discover_hosts_once(e.discovery_script, e.slots_per_host > 0 ? e.slots_per_host : 1,
                                   e.discovery_timeout);
  if (!hosts) return hosts.error();
  ElasticRound first = next_round({}, *hosts, e.max_np);
  // (The driver is to wait for them; until it exists, a start without them is refused.)
  WaitVerdict wait = judge_wait(static_cast<long long>(first.slots.size()), e.min_np, 0, e.timeout);
  if (wait.action != WaitVerdict::kStart)
    return error_of(ErrorKind::kUsage, "elastic: the discovered hosts are too few: " + wait.message);
  LaunchOptions o = opts;
  o.hosts.clear();
  o.hostfile.clear();
  for (const auto& h : host_order({}, *hosts)) {
    bool v6 = h.host.find(':') != std::string::npos;
    o.hosts += (o.hosts.empty() ? "" : ",") + (v6 ? "[" + h.host + "]" : h.host) + ":" + std::to_string(h.slots);
  }
  o.np = static_cast<int>(first.slots.size());
  return o;
}

}  // namespace hvdrun
