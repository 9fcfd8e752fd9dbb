// The job's deciding steps about its hosts (job.h): which ranks run here and which hosts
// get an agent, the budget this machine needs, each host's environment, --dry-run's binding;
// this executable's path and ~/.ssh.
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "launcher/host_preparation.h"
#include "launcher/job.h"
#include "launcher/local_host.h"
#include "launcher/placement.h"

namespace hvdrun {

// The job's hosts: this machine's ranks run here, the others through an agent each.
JobHosts split_hosts(const JobPlan& p) {
  JobHosts h;
  // With srun every node runs an agent, this one included (hvdrun may run outside the
  // allocation, under salloc); otherwise this machine's ranks run here.
  const bool all_remote = p.launcher == LauncherKind::kSlurm;
  for (const auto& r : p.ranks) {
    if (!all_remote && is_local_host(r.host)) {
      h.any_local = true;
    } else if (!h.remote_index.count(r.host)) {
      h.remote_index[r.host] = static_cast<int>(h.remote_names.size());
      h.remote_names.push_back(r.host);
    }
  }
  return h;
}

// --dry-run's "bind" of each rank: this machine's as placed here; another host's is decided
// there, from its own topology.
Result<std::map<int, std::string>> dry_run_binding(const JobPlan& p, const std::string& bind_to) {
  JobHosts h = split_hosts(p);
  std::vector<int> here;
  std::map<int, std::string> out;
  for (const auto& r : p.ranks) {
    if (h.remote_index.count(r.host)) out[r.rank] = bind_to == "none" ? bind_to : bind_to + ", decided on " + r.host;
    else here.push_back(r.rank);
  }
  auto placed = place_on_this_host(bind_to, static_cast<long long>(here.size()));
  if (!placed) return placed.error();
  for (size_t i = 0; i < here.size(); ++i) {
    const auto& pl = (*placed)[i];
    out[here[i]] = pl.what + (pl.cpus.empty() ? "" : ": cpus " + cpu_list_text(pl.cpus));
  }
  return out;
}

// The descriptors and processes this job needs here, before anything is spawned.
BudgetNeed budget_need(const JobPlan& p, const JobHosts& h) {
  BudgetNeed need;
  need.all_ranks = static_cast<long long>(p.ranks.size());
  for (const auto& r : p.ranks) need.local_ranks += h.remote_index.count(r.host) ? 0 : 1;
  need.remote_hosts = static_cast<long long>(h.remote_names.size());
  return need;
}

// The job's environment for the ranks of `host`: the addresses they use there.
JobEnv env_of_host(const JobEnv& base, const Addressing& addressing, const std::string& host) {
  JobEnv e = base;
  auto it = addressing.remote.find(host);
  const HostAddressing& h = it != addressing.remote.end() ? it->second : addressing.local;
  e.rendezvous_addr = h.rendezvous_addr;
  e.iface = h.iface;
  e.gloo_iface = h.gloo_iface;
  return e;
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "hvdrun";
}

std::string ssh_dir() {
  const char* home = std::getenv("HOME");
  if (!home || !*home) {
    passwd* pw = getpwuid(getuid());
    home = pw ? pw->pw_dir : "/";
  }
  return std::string(home) + "/.ssh";
}

}  // namespace hvdrun
