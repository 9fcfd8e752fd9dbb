#include "launcher/elastic_job.h"

#include <random>
#include <set>

#include "launcher/discovery_runner.h"
#include "launcher/exit_status.h"
#include "launcher/local_host.h"

namespace hvdrun {

struct ElasticJob::Store : ElasticStore {
  rdv::Server* server = nullptr;
  void begin_round(int round, const std::vector<RankInfo>& ranks) override {
    std::vector<rdv::ExpectedRank> expected;
    for (const auto& r : ranks) expected.push_back({r.host, r.local_rank});
    server->begin_round(round, std::move(expected));
  }
  Status set(const std::string& key, const std::string& value) override { return server->set(key, value); }
};

namespace {

// The discovery script, its hosts that are not this machine taken out (the warning once
// per host, as a line of the script's own output would be).
Result<DiscoveryOutput> discover_here(const ElasticOptions& e, std::set<std::string>& warned, OutputSink& sink) {
  auto o = run_discovery_script(e.discovery_script, e.discovery_timeout);
  if (!o) return o;
  DiscoveredHosts d = judge_discovery_output(*o, e.slots_per_host > 0 ? e.slots_per_host : 1, e.discovery_script,
                                             e.discovery_timeout, false);
  if (!d.verdict.use) return o;  // the driver says why
  std::string kept;
  for (const auto& h : d.hosts) {
    if (is_local_host(h.host)) {
      kept += h.host + ":" + std::to_string(h.slots) + "\n";
    } else if (warned.insert(h.host).second) {
      sink.notice("hvdrun: warning: elastic: host " + h.host +
                  " is not this machine; this build runs elastic workers on this machine only: left out");
    }
  }
  o->out = kept;
  return o;
}

}  // namespace

ElasticJob::ElasticJob(const LaunchOptions& opts, const JobPlan& plan, OutputSink& sink, Launch launch,
                       Watchdog* watchdog)
    : store_(std::make_unique<Store>()) {
  ElasticDriverIo io{system_process_runner(), *store_, sink, nullptr, std::move(launch), nullptr, nullptr};
  if (watchdog) io.group_ended = [watchdog](pid_t g) { watchdog->forget(g); };
  if (!opts.elastic.discovery_script.empty()) {
    auto warned = std::make_shared<std::set<std::string>>();
    io.discover = [e = opts.elastic, warned, &sink] { return discover_here(e, *warned, sink); };
  }
  auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
  io.random = [rng] { return std::uniform_real_distribution<double>(0, 1)(*rng); };
  driver_ = std::make_unique<ElasticDriver>(opts.elastic, opts.kill_grace, plan.hosts, std::move(io));
}

ElasticJob::~ElasticJob() = default;

rdv::ServerCallbacks ElasticJob::callbacks() {
  rdv::ServerCallbacks cb;
  ElasticDriver* d = driver_.get();
  Store* s = store_.get();
  // On the server's thread: its round is the one the rank belongs to.
  cb.on_rank_left = [d, s](int rank) { d->rank_left(s->server->round(), rank); };
  cb.on_elastic_commit = [d](int round, long long commit) { d->commit_reported(round, commit); };
  cb.on_start_timeout = [d](const std::string& message) { d->request_end(message, exit_code::kStartTimeout); };
  return cb;
}

void ElasticJob::attach(rdv::Server& server) { store_->server = &server; }

int ElasticJob::run(const JobPlan& plan) { return driver_->run(plan.ranks); }

std::string elastic_refusal(const JobPlan& plan) {
  for (const auto& h : plan.hosts)
    if (!is_local_host(h.host))
      return "elastic training: host " + h.host +
             " is not this machine; this build runs an elastic job's workers on this machine only";
  return "";
}

}  // namespace hvdrun
