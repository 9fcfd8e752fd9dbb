#include "launcher/job_preflight.h"

#include <cstdio>
#include <set>

#include "hvdrun_version.h"
#include "launcher/agent_wire.h"
#include "launcher/exit_status.h"

namespace hvdrun {

PreflightJob preflight_job(const std::map<std::string, std::string>& launcher_env,
                           const std::vector<EnvOverride>& overrides, const std::string& network_interface) {
  PreflightJob job;
  job.version = HVDRUN_VERSION_STRING;
  job.protocol = agentwire::kProtocol;
  if (!network_interface.empty()) job.ifaces.push_back({"--network-interface", network_interface});
  for (const char* name : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"})
    if (std::string v = worker_tunable(launcher_env, overrides, name); !v.empty()) job.ifaces.push_back({name, v});
  return job;
}

PreflightHost local_preflight_host(const std::string& name, int slots) {
  PreflightHost h;
  h.host = name;
  h.slots = slots;
  h.facts = collect_host_facts();
  if (auto all = interface_addresses()) h.addrs = *all;
  return h;
}

PreflightHost remote_preflight_host(const RemoteHost& r, int slots) {
  PreflightHost h;
  h.host = r.host();
  h.slots = slots;
  h.facts = r.hello().facts;
  h.addrs = r.hello().ifaces;
  h.clock_offset = r.clock_offset();
  h.has_python = r.ready().has_python;
  h.python = r.ready().python;
  return h;
}

std::vector<PreflightHost> preflight_hosts_of(const std::vector<RankInfo>& ranks,
                                              const std::map<std::string, int>& remote_index,
                                              const std::vector<const RemoteHost*>& remotes) {
  std::map<std::string, int> slots;
  for (const auto& r : ranks) slots[r.host] += 1;
  std::set<std::string> seen;
  std::vector<PreflightHost> out;
  for (const auto& r : ranks) {
    if (!seen.insert(r.host).second) continue;
    auto it = remote_index.find(r.host);
    out.push_back(it == remote_index.end() ? local_preflight_host(r.host, slots[r.host])
                                           : remote_preflight_host(*remotes[static_cast<size_t>(it->second)], slots[r.host]));
  }
  return out;
}

Status check_joining_host(std::vector<PreflightHost> hosts, const PreflightJob& job, const RemoteHost& host) {
  hosts.push_back(remote_preflight_host(host, 1));
  for (const auto& f : check_preflight(hosts, job))
    if (f.host == host.host() && f.severity == Finding::kError)
      return make_error(ErrorKind::kLaunchFailed, "host " + host.host() + ": pre-flight: " + f.text);
  return {};
}

void print_preflight_table(const std::vector<PreflightHost>& hosts, const PreflightJob& job,
                           const std::vector<PreflightFinding>& findings) {
  std::string table = preflight_table(hosts, job, findings);
  std::fwrite(table.data(), 1, table.size(), stdout);
  std::fflush(stdout);
}

std::optional<int> say_preflight_findings(const std::vector<PreflightFinding>& findings, size_t hosts) {
  for (const auto& line : preflight_lines(findings, Finding::kWarning))
    std::fprintf(stderr, "hvdrun: warning: pre-flight: %s\n", line.c_str());
  auto errors = preflight_lines(findings, Finding::kError);
  if (errors.empty()) return std::nullopt;
  for (const auto& line : errors) std::fprintf(stderr, "hvdrun: pre-flight: %s\n", line.c_str());
  std::fprintf(stderr,
               "hvdrun: the pre-flight check failed on %zu of %zu host(s); nothing was started on any host "
               "(--check prints every host's facts, --no-preflight skips the check)\n",
               errors.size(), hosts);
  return exit_code_for(error_of(ErrorKind::kLaunchFailed, "pre-flight"));
}

LatePythonCheck::LatePythonCheck(std::vector<PreflightHost> hosts, PreflightJob asks, Say say)
    : hosts_(std::move(hosts)), asks_(std::move(asks)), say_(std::move(say)) {
  if (!say_) say_ = [](const std::string& line) { std::fprintf(stderr, "hvdrun: warning: pre-flight: %s\n", line.c_str()); };
}

void LatePythonCheck::arrived(const std::string& host, const PythonFacts& facts) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& h : hosts_)
    if (h.host == host && !h.has_python) {
      h.has_python = true;
      h.python = facts;
      if (++came_ == hosts_.size()) say_locked();
    }
}

void LatePythonCheck::finish() {
  std::lock_guard<std::mutex> lk(mu_);
  say_locked();
}

void LatePythonCheck::listen_to(const std::vector<std::unique_ptr<RemoteHost>>& remotes) {
  for (const auto& r : remotes)
    r->on_python_facts([this](const std::string& host, const PythonFacts& p) { arrived(host, p); });
}

void LatePythonCheck::say_locked() {
  if (said_ || came_ == 0) return;
  said_ = true;
  auto findings = check_preflight(hosts_, asks_);
  std::erase_if(findings, [](const PreflightFinding& f) { return f.column != "python"; });  // (said before)
  for (const auto& line : preflight_lines(findings, Finding::kWarning)) say_(line);
}

}  // namespace hvdrun
