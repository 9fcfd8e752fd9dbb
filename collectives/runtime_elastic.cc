// The runtime in an elastic job (docs/ELASTIC.md): hvd_init takes this slot's numbers in
// the job's newest round from the store and registers for that round; a watcher thread
// follows the membership changes, and ends this process's round when one ends it.
#include <sys/socket.h>

#include <algorithm>

#include "collectives/runtime.h"
#include "common/deadline.h"
#include "common/strings.h"
#include "common/tunables.h"

namespace hvdrun {
namespace {

// This slot's rank view in `round`: kRemoved when the slot is not in it.
Result<RankView> slot_view(rdv::Client& client, long long round, const std::string& slot, const std::string& host) {
  auto value = client.get(elastic_slot_key(round, slot));
  if (!value && value.error().kind != ErrorKind::kMissingKey) return value.error();
  if (!value || *value == "removed")
    return make_error(ErrorKind::kRemoved, "elastic slot " + slot + " was removed from the job (it is not in round " +
                                               std::to_string(round) + ")");
  auto n = parse_slot_numbers(*value);
  if (!n) return with_kind(wrap(n.error(), "round " + std::to_string(round)), ErrorKind::kRendezvous);
  RankView v;
  v.rank = n->rank, v.size = n->size, v.local_rank = n->local_rank, v.local_size = n->local_size;
  v.cross_rank = n->cross_rank, v.cross_size = n->cross_size, v.host = host;
  return v;
}

Result<long long> newest_round(rdv::Client& client) {
  auto value = client.get(kElasticRoundKey);
  if (!value) return with_kind(value.error(), ErrorKind::kRendezvous);
  auto round = parse_int(*value, kElasticRoundKey, 1, 1ll << 40);
  if (!round) return with_kind(round.error(), ErrorKind::kRendezvous);
  return *round;
}

}  // namespace

Status Runtime::register_elastic(const std::string& addr) {
  auto slot = tunable_if_set("HVDRUN_ELASTIC_SLOT");
  if (!slot || slot->empty())
    return make_error(ErrorKind::kRendezvous, "HVDRUN_ELASTIC_SLOT is not set (start the program with hvdrun)");
  const std::string who = "elastic slot " + *slot;
  const std::string host = tunable_if_set("HOROVOD_HOSTNAME").value_or(slot->substr(0, slot->rfind(':')));
  std::string secret;
  auto client = connect_rendezvous(addr, who, &secret);
  if (!client) return client.error();
  auto watch = connect_rendezvous(addr, who, &secret);
  if (!watch) return watch.error();
  auto round = newest_round(*client);
  if (!round) return wrap(round.error(), who);
  auto view = slot_view(*client, *round, *slot, host);
  if (!view) return view.error();
  auto listener = listen_data_plane(*client, view->rank);
  if (!listener) return listener.error();
  auto request = [&](const RankView& v, long long r) {
    rdv::RegisterRequest req{v.rank, v.size, v.host, listener->addr, listener->port};
    req.round = static_cast<int32_t>(r);
    return req;
  };
  // A round over before this slot registered: the server names its newest.
  auto for_round = [&](int64_t r) -> Result<rdv::RegisterRequest> {
    auto v = slot_view(*client, r, *slot, host);
    if (!v) return v.error();
    *view = *v;
    *round = r;
    return request(*v, r);
  };
  auto reg = client->register_in_round(request(*view, *round), for_round,
                                       deadline_in(2 * tunable_double("HVDRUN_START_TIMEOUT") + 10));
  if (!reg) {
    ErrorKind kind = reg.error().kind;
    if (kind != ErrorKind::kTimeout && kind != ErrorKind::kRemoved) kind = ErrorKind::kRendezvous;
    return with_kind(wrap(reg.error(), who), kind);
  }
  elastic_round_ = *round;
  watch_client_.emplace(std::move(*watch));
  adopt(*view, std::move(secret), std::move(*client), std::move(*listener), *reg);
  return {};
}

// Every update after the one that formed this round (update n-1 formed round n) counts in
// hvd_elastic_updates' kinds; the seq already seen stays.
void Runtime::start_watcher() {
  const long long formed = elastic_round_ - 1;
  elastic_counters_.kinds = 0;
  long long seen = std::max(elastic_counters_.seq.load(), formed);
  elastic_counters_.seq = seen;
  watcher_ = std::make_unique<ElasticWatcher>(std::move(*watch_client_), elastic_round_, formed, seen,
                                              &elastic_counters_, [this](long long seq) { end_round(seq); });
  watch_client_.reset();
}

// hvd_init in an elastic job: the watcher starts as soon as this slot is registered, so
// that a round that ends while hvd_init connects its ring (a peer of it died) ends hvd_init
// at once with kReset, never after HVDRUN_TIMEOUT.
Status Runtime::init_elastic(const std::string& addr) {
  if (auto s = register_elastic(addr); !s) return s;
  start_watcher();
  Status s = bring_up();
  if (s) return s;
  watcher_.reset();
  if (!round_ended_) return s;
  std::lock_guard<std::mutex> lk(end_mu_);
  return with_message(*round_end_, round_end_->message + " (while hvd_init connected its ring: " + s.error().message + ")");
}

// On the watcher's thread, from hvd_init's registration to hvd_shutdown (which joins it
// first): whatever of the round exists stops, and what hvd_init makes later is stopped as
// it is published.
void Runtime::end_round(long long seq) {
  const Error e = make_error(ErrorKind::kReset, "elastic round " + std::to_string(elastic_round_) +
                                                    " is over (membership change " + std::to_string(seq) +
                                                    "): hvd_shutdown(), then hvd_init() joins the next round");
  std::lock_guard<std::mutex> end(end_mu_);
  round_end_ = e;
  round_ended_ = true;
  // hvd_init may be accepting this round's ring connection from a peer that is gone.
  if (listener_.fd.valid()) ::shutdown(listener_.fd.get(), SHUT_RDWR);
  // Each engine first: it wakes its idle thread off the ring, which interrupt() then takes.
  if (engine_) engine_->end_round(e);
  if (ring_comm_) ring_comm_->interrupt();
  gpu_.end(e);  // NCCL's communicators aborted: a blocked device collective returns
  std::lock_guard<std::mutex> lk(sets_mu_);
  for (auto& [id, ps] : sets_) {
    if (ps->engine) ps->engine->end_round(e);
    if (ps->ring) ps->ring->interrupt();
  }
}

void Runtime::publish_ring(std::unique_ptr<Ring> ring) {
  std::lock_guard<std::mutex> lk(end_mu_);
  ring_comm_ = std::move(ring);
  if (round_ended_ && ring_comm_) ring_comm_->interrupt();
}

void Runtime::publish_engine(std::shared_ptr<Engine> engine) {
  std::lock_guard<std::mutex> lk(end_mu_);
  engine_ = std::move(engine);
  if (round_end_ && engine_) engine_->end_round(*round_end_);
}

void Runtime::drop_ring() {
  std::lock_guard<std::mutex> lk(end_mu_);
  ring_comm_.reset();
}

Status Runtime::report_commit(long long commit) {
  if (!initialized_) return make_error(ErrorKind::kNotInitialized, "hvd_elastic_commit: call hvd_init() first");
  if (elastic_round_ == 0) return {};
  std::lock_guard<std::mutex> lk(client_mu_);
  if (!client_) return {};
  return client_->set(rdv::kElasticCommitKeyPrefix + std::to_string(elastic_round_), std::to_string(commit));
}

std::string Runtime::generation() const {
  return elastic_round_ ? "round" + std::to_string(elastic_round_) : "init" + std::to_string(inits_);
}

ElasticUpdates Runtime::elastic_updates() const {
  return {elastic_counters_.seq.load(), elastic_counters_.kinds.load()};
}

ErrorKind Runtime::kind_seen(ErrorKind kind) const {
  if (kind == ErrorKind::kPeerLost && tunable_string("HVDRUN_ELASTIC") == "1") return ErrorKind::kReset;
  return kind;
}

}  // namespace hvdrun
