#include "launcher/elastic_job.h"

#include <random>

#include "common/deadline.h"

#include "launcher/discovery_runner.h"
#include "launcher/exit_status.h"

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

Result<std::unique_ptr<ElasticJob>> ElasticJob::create(const LaunchOptions& opts, const JobPlan& plan, OutputSink& sink,
                                                       Launch launch, ElasticAgents::Opener opener,
                                                       double heartbeat_timeout, Watchdog* watchdog) {
  auto driver_wake = WakePipe::open();
  if (!driver_wake) return driver_wake.error();
  auto agents_wake = WakePipe::open();
  if (!agents_wake) return agents_wake.error();
  return std::make_unique<ElasticJob>(opts, plan, sink, std::move(launch), std::move(opener), heartbeat_timeout,
                                      watchdog, std::move(*driver_wake), std::move(*agents_wake));
}

ElasticJob::ElasticJob(const LaunchOptions& opts, const JobPlan& plan, OutputSink& sink, Launch launch,
                       ElasticAgents::Opener opener, double heartbeat_timeout, Watchdog* watchdog,
                       WakePipe driver_wake, WakePipe agents_wake)
    : store_(std::make_unique<Store>()),
      agents_(std::make_unique<ElasticAgents>(std::move(opener), sink, heartbeat_timeout, std::move(agents_wake))) {
  ElasticDriverIo io{*agents_, *store_, sink, nullptr, std::move(launch), nullptr, nullptr};
  io.hosts = agents_.get();
  if (watchdog)  // a remote worker's id is not a group of this machine's
    io.group_ended = [watchdog](pid_t g) {
      if (g < ElasticAgents::kFirstRemoteId) watchdog->forget(g);
    };
  if (!opts.elastic.discovery_script.empty())
    io.discover = [e = opts.elastic] { return run_discovery_script(e.discovery_script, e.discovery_timeout); };
  auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
  io.random = [rng] { return std::uniform_real_distribution<double>(0, 1)(*rng); };
  driver_ = std::make_unique<ElasticDriver>(opts.elastic, opts.kill_grace, plan.hosts, std::move(io),
                                            std::move(driver_wake));
}

ElasticJob::~ElasticJob() = default;

rdv::ServerCallbacks ElasticJob::callbacks() {
  rdv::ServerCallbacks cb;
  ElasticDriver* d = driver_.get();
  Store* s = store_.get();
  // On the server's thread: its round is the one the rank belongs to.
  cb.on_rank_left = [d, s](int rank) { d->rank_left(s->server->round(), rank); };
  cb.on_elastic_commit = [d](int round, long long commit) { d->commit_reported(round, commit); };
  cb.on_elastic_registered = [d](int round, int rank) { d->rank_registered(round, rank); };
  cb.on_start_timeout = [d](const std::string& message) { d->request_end(message, exit_code::kStartTimeout); };
  return cb;
}

void ElasticJob::attach(rdv::Server& server) { store_->server = &server; }

int ElasticJob::run(const JobPlan& plan, std::vector<std::unique_ptr<RemoteHost>> remotes) {
  for (auto& r : remotes) agents_->add(std::move(r));
  int code = driver_->run(plan.ranks);
  agents_->close_all();
  return code;
}

Result<std::unique_ptr<RemoteHost>> open_elastic_host(const std::string& host, AgentStarter& starter,
                                                      const RemoteSettings& rs,
                                                      const std::function<Status(const RemoteHost&)>& admit,
                                                      const AgentJob& job, const std::atomic<bool>& abort) {
  auto r = std::make_unique<RemoteHost>(host, rs, starter);
  r->abort_when(&abort);
  auto deadline = deadline_in(rs.start_timeout);
  if (auto st = starter.begin({host}, deadline); !st) return st.error();
  if (auto st = r->connect(deadline); !st) return st.error();
  if (auto st = r->check_abort(); !st) return st.error();  // (set after its hello came)
  if (auto st = admit(*r); !st) return st.error();
  if (auto st = r->prepare(job); !st) return st.error();
  r->abort_when(nullptr);  // (`abort` ends with its opening)
  return r;
}

}  // namespace hvdrun
