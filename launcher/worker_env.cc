#include "launcher/worker_env.h"

#include <cctype>
#include <cstdio>
#include <optional>

#include "launcher/exit_status.h"
#include "common/strings.h"
#include "common/tunables.h"

namespace hvdrun {
namespace {

bool valid_env_name(const std::string& n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

}  // namespace

Result<std::vector<EnvOverride>> parse_env_overrides(const std::vector<std::string>& specs,
                                                      const std::map<std::string, std::string>& launcher_env) {
  std::vector<EnvOverride> out;
  for (const auto& spec : specs) {
    size_t eq = spec.find('=');
    EnvOverride o;
    o.name = spec.substr(0, eq);
    if (!valid_env_name(o.name))
      return error_of(ErrorKind::kUsage, "-x '" + spec + "': expected NAME or NAME=VALUE with NAME of letters, digits and '_'");
    if (eq != std::string::npos) {
      o.value = spec.substr(eq + 1);
    } else {
      auto it = launcher_env.find(o.name);
      if (it == launcher_env.end())
        return error_of(ErrorKind::kUsage, "-x '" + spec + "': " + o.name + " is not set in hvdrun's environment; use -x " + o.name +
                              "=VALUE");
      o.value = it->second;
    }
    out.push_back(std::move(o));
  }
  return out;
}

std::string worker_tunable(const std::map<std::string, std::string>& launcher_env,
                           const std::vector<EnvOverride>& overrides, std::string_view env) {
  auto value_of = [&](std::string_view name) -> std::optional<std::string> {
    std::optional<std::string> v;
    if (auto it = launcher_env.find(std::string(name)); it != launcher_env.end()) v = it->second;
    for (const auto& o : overrides)  // (in order: the last one wins)
      if (o.name == name) v = o.value;
    return v;
  };
  const Tunable* t = find_tunable(env);
  if (auto v = value_of(env)) return *v;
  if (t && !t->horovod.empty())
    if (auto v = value_of(t->horovod)) return *v;
  return t ? std::string(t->default_value) : "";
}

std::map<std::string, std::string> environ_to_map(char** envp) {
  std::map<std::string, std::string> env;
  for (char** e = envp; e && *e; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

namespace {

// 4. of build_worker_env: the contract, what each rank is and how it reaches the job.
void set_contract(std::map<std::string, std::string>& env, const JobEnv& job, const RankInfo& r, int group_rank) {
  auto set = [&](const char* k, const std::string& v) { env[k] = v; };
  auto seti = [&](const char* k, int v) { env[k] = std::to_string(v); };
  seti("HOROVOD_RANK", r.rank);
  seti("HOROVOD_SIZE", r.size);
  seti("HOROVOD_LOCAL_RANK", r.local_rank);
  seti("HOROVOD_LOCAL_SIZE", r.local_size);
  seti("HOROVOD_CROSS_RANK", r.cross_rank);
  seti("HOROVOD_CROSS_SIZE", r.cross_size);
  set("HOROVOD_HOSTNAME", r.host);
  seti("RANK", r.rank);
  seti("WORLD_SIZE", r.size);
  seti("LOCAL_RANK", r.local_rank);
  seti("LOCAL_WORLD_SIZE", r.local_size);
  seti("GROUP_RANK", group_rank);
  set("MASTER_ADDR", job.master_addr);
  seti("MASTER_PORT", job.master_port);
  if (!job.rendezvous_addr.empty()) {
    set("HVDRUN_RENDEZVOUS_ADDR", job.rendezvous_addr);
    seti("HVDRUN_RENDEZVOUS_PORT", job.rendezvous_port);
    set("HVDRUN_SECRET", job.secret_hex);
    char buf[32];
    snprintf(buf, sizeof buf, "%g", job.start_timeout);
    set("HVDRUN_START_TIMEOUT", buf);
  }
  if (!job.iface.empty()) set("HVDRUN_IFACE", job.iface);
  // --horovod: what horovodrun --gloo gives (horovod/runner/gloo_run.py, create_run_env_vars).
  if (job.horovod_port > 0 && !job.rendezvous_addr.empty()) {
    set("HOROVOD_GLOO_RENDEZVOUS_ADDR", job.rendezvous_addr);
    seti("HOROVOD_GLOO_RENDEZVOUS_PORT", job.horovod_port);
    set("HOROVOD_CONTROLLER", "gloo");
    set("HOROVOD_CPU_OPERATIONS", "gloo");
    if (!job.gloo_iface.empty()) set("HOROVOD_GLOO_IFACE", job.gloo_iface);
  }
  if (!job.python_path_prepend.empty()) {
    auto it = env.find("PYTHONPATH");
    set("PYTHONPATH", it == env.end() || it->second.empty() ? job.python_path_prepend
                                                              : job.python_path_prepend + ":" + it->second);
  }
}

}  // namespace

std::map<std::string, std::string> build_worker_env(const std::map<std::string, std::string>& launcher_env,
                                                    const std::vector<EnvOverride>& overrides, const JobEnv& job,
                                                    const RankInfo& r, int group_rank) {
  std::map<std::string, std::string> env;
  // 1. hvdrun's defaults: only where the user's environment says nothing.
  env["PYTHONUNBUFFERED"] = "1";
  if (!job.iface.empty()) {
    env["NCCL_SOCKET_IFNAME"] = job.iface;
    env["GLOO_SOCKET_IFNAME"] = job.iface;
  } else if (job.horovod_port > 0 && !job.gloo_iface.empty()) {
    env["NCCL_SOCKET_IFNAME"] = job.gloo_iface;  // --horovod: as horovodrun --gloo (lo for a local job)
  }
  // 2. The user's environment (hvdrun's own, less BASH_FUNC_* and OLDPWD).
  for (const auto& [k, v] : launcher_env) {
    if (starts_with(k, "BASH_FUNC_") || k == "OLDPWD") continue;
    env[k] = v;
  }
  // 3. What the command line asks for: its flags (--nccl-debug, Horovod's tuning flags),
  //    then -x, which wins over everything but the contract below.
  for (const auto& [k, v] : job.flag_env) env[k] = v;
  if (!job.nccl_debug.empty()) env["NCCL_DEBUG"] = job.nccl_debug;
  for (const auto& o : overrides) env[o.name] = o.value;
  // 4. The contract: what each rank is, and how to reach the job. Always hvdrun's.
  set_contract(env, job, r, group_rank);
  return env;
}

std::vector<std::string> env_to_strings(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace hvdrun
