#include "launcher/host_preparation.h"

#include "common/strings.h"
#include "launcher/spawn.h"

namespace hvdrun {

Result<std::string> check_host(const HostNeed& need, const ProcessBudget& have) {
  std::string exe;
  if (!need.program.empty()) {
    auto e = resolve_program(need.program, need.path);
    if (!e) return e.error();
    exe = *e;
  }
  if (auto st = check_process_budget(have, need.budget); !st) return st.error();
  return exe;
}

Result<PreparedHost> prepare_host(const HostNeed& need, double kill_grace) {
  auto exe = check_host(need, read_process_budget(tasks_needed(need.budget)));
  if (!exe) return exe.error();
  auto placement = place_on_this_host(need.bind_to, need.program.empty() ? 0 : need.budget.local_ranks);
  if (!placement) return placement.error();
  // The watchdog is forked before any thread or connection of ours exists.
  auto watchdog = Watchdog::start(kill_grace);
  if (!watchdog) return watchdog.error();
  return PreparedHost{std::move(*exe), std::move(*watchdog), std::move(*placement)};
}

Result<std::vector<RankPlacement>> place_on_this_host(const std::string& bind_to, long long local_ranks) {
  auto bind = parse_bind_to(bind_to, "--bind-to");
  if (!bind) return bind.error();
  if (*bind == BindTo::kNone || local_ranks <= 0) return place_ranks(Topology{}, BindTo::kNone, static_cast<int>(local_ranks));
  return place_ranks(read_topology("/sys", allowed_cpus()), *bind, static_cast<int>(local_ranks));
}

std::string path_in(const std::vector<std::string>& env) {
  std::string path;
  for (const auto& kv : env)
    if (starts_with(kv, "PATH=")) path = kv.substr(5);
  return path;
}

}  // namespace hvdrun
