// An elastic job inside hvdrun's job (job.cc): the driver (elastic_driver.h) over this
// machine's processes, the rendezvous server as its store, the discovery script run every
// interval. The workers run on this machine only for now: a host the discovery script
// names that is not this machine is left out with a warning.
#pragma once

#include <functional>
#include <memory>

#include "launcher/elastic_driver.h"
#include "launcher/options.h"
#include "launcher/plan.h"
#include "launcher/watchdog.h"
#include "rendezvous/server.h"

namespace hvdrun {

class ElasticJob {
 public:
  using Launch = std::function<SpawnRequest(const RankInfo&, int round, const ElasticSlot&)>;
  // `watchdog` (may be null): told each worker group that has ended.
  ElasticJob(const LaunchOptions& opts, const JobPlan& plan, OutputSink& sink, Launch launch,
             Watchdog* watchdog = nullptr);
  ~ElasticJob();
  // The rendezvous server's callbacks for an elastic job (a worker's fatal error, its
  // lost peer: the driver learns of the failure from the worker's end).
  rdv::ServerCallbacks callbacks();
  // The server, once started (before run()).
  void attach(rdv::Server& server);
  ElasticDriver& driver() { return *driver_; }
  // The job, with the plan's ranks as round 1: its exit code.
  int run(const JobPlan& plan);

 private:
  struct Store;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ElasticDriver> driver_;
};

// Why an elastic job cannot run here ("" when it can): a host of the plan that is not
// this machine.
std::string elastic_refusal(const JobPlan& plan);

}  // namespace hvdrun
