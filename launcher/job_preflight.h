// The job's side of the pre-flight check (preflight.h): its hosts' facts gathered (this
// machine's here, the others' from their agents) and the findings said on stderr.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "launcher/plan.h"
#include "launcher/preflight.h"
#include "launcher/remote_host.h"
#include "launcher/worker_env.h"

namespace hvdrun {

// What the job asks of every host: hvdrun's version and protocol, and the interfaces the
// workers are told to use (--network-interface, NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME
// as the workers get them: hvdrun's environment, then -x).
PreflightJob preflight_job(const std::map<std::string, std::string>& launcher_env,
                           const std::vector<EnvOverride>& overrides, const std::string& network_interface);

// This machine's facts, as an agent collects its host's.
PreflightHost local_preflight_host(const std::string& name, int slots);
// A connected remote host's, from its hello (and, once prepared, its kReady).
PreflightHost remote_preflight_host(const RemoteHost& host, int slots);

// Every host of the job's ranks, in their order, with its slots: this machine's facts for
// a host not in `remote_index` (an index into `remotes`).
std::vector<PreflightHost> preflight_hosts_of(const std::vector<RankInfo>& ranks,
                                              const std::map<std::string, int>& remote_index,
                                              const std::vector<const RemoteHost*>& remotes);

// A host that joins a running (elastic) job: the pre-flight check of its hello against the
// job's hosts; an error about it refuses it (its first, naming the host).
Status check_joining_host(std::vector<PreflightHost> hosts, const PreflightJob& job, const RemoteHost& host);

// The table on stdout.
void print_preflight_table(const std::vector<PreflightHost>& hosts, const PreflightJob& job,
                           const std::vector<PreflightFinding>& findings);

// The warnings ("hvdrun: warning: pre-flight: HOST: ..."), then the errors, one line per
// host, and what they mean. The exit code when an error stops the job.
std::optional<int> say_preflight_findings(const std::vector<PreflightFinding>& findings, size_t hosts);

// The Python facts of a job that runs (not --check): each host's come once its workers
// run (its agent's probe; this machine's own probe), off the start path. They are checked
// when the last one came, or at the job's end with those that came: their differences are
// warnings (said once, after the start), never a reason to stop. Thread-safe.
class LatePythonCheck {
 public:
  using Say = std::function<void(const std::string& line)>;  // one warning (default: stderr)
  LatePythonCheck(std::vector<PreflightHost> hosts, PreflightJob asks, Say say = {});
  void arrived(const std::string& host, const PythonFacts& facts);
  void finish();
  // Every remote host's facts (RemoteHost::on_python_facts) come here.
  void listen_to(const std::vector<std::unique_ptr<RemoteHost>>& remotes);

 private:
  void say_locked();
  std::mutex mu_;
  std::vector<PreflightHost> hosts_;
  PreflightJob asks_;
  Say say_;
  size_t came_ = 0;
  bool said_ = false;
};

}  // namespace hvdrun
