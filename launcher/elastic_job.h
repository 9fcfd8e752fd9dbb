// An elastic job inside hvdrun's job (job.cc): the driver (elastic_driver.h) over this
// machine's processes and the remote hosts' agents (elastic_remote.h), the rendezvous
// server as its store, the discovery script run every interval.
#pragma once

#include <functional>
#include <memory>

#include "launcher/elastic_driver.h"
#include "launcher/elastic_remote.h"
#include "launcher/options.h"
#include "launcher/plan.h"
#include "launcher/watchdog.h"
#include "rendezvous/server.h"

namespace hvdrun {

class ElasticJob {
 public:
  using Launch = std::function<SpawnRequest(const RankInfo&, int round, const ElasticSlot&)>;
  // `opener`: a host that discovery names while the job runs (open_elastic_host).
  // `watchdog` (may be null): told each of this machine's worker groups that has ended.
  // Fails (kSystem) when its wake pipes cannot be made.
  static Result<std::unique_ptr<ElasticJob>> create(const LaunchOptions& opts, const JobPlan& plan, OutputSink& sink,
                                                    Launch launch, ElasticAgents::Opener opener,
                                                    double heartbeat_timeout, Watchdog* watchdog = nullptr);
  ElasticJob(const LaunchOptions& opts, const JobPlan& plan, OutputSink& sink, Launch launch,
             ElasticAgents::Opener opener, double heartbeat_timeout, Watchdog* watchdog, WakePipe driver_wake,
             WakePipe agents_wake);
  ~ElasticJob();
  // The rendezvous server's callbacks for an elastic job (a worker's fatal error, its
  // lost peer: the driver learns of the failure from the worker's end).
  rdv::ServerCallbacks callbacks();
  // The server, once started (before run()).
  void attach(rdv::Server& server);
  ElasticDriver& driver() { return *driver_; }
  // The job, with the plan's ranks as round 1 (`remotes`: its remote hosts, connected and
  // prepared): its exit code. Every agent's link is closed when it returns.
  int run(const JobPlan& plan, std::vector<std::unique_ptr<RemoteHost>> remotes);

 private:
  struct Store;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ElasticAgents> agents_;
  std::unique_ptr<ElasticDriver> driver_;
};

// A host that discovery names while an elastic job runs (on its opening thread): its agent
// started through `starter` by the start time-out, `admit` (the pre-flight check of its
// hello, its addresses planned) and `job` (AgentJob::elastic) prepared there; given up soon
// after `abort` is set. Errors name the host.
Result<std::unique_ptr<RemoteHost>> open_elastic_host(const std::string& host, AgentStarter& starter,
                                                      const RemoteSettings& rs,
                                                      const std::function<Status(const RemoteHost&)>& admit,
                                                      const AgentJob& job, const std::atomic<bool>& abort);

}  // namespace hvdrun
