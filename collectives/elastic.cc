#include "collectives/elastic.h"

#include <sstream>
#include <vector>

#include "common/log.h"

#include "common/strings.h"

namespace hvdrun {

std::string elastic_slot_key(long long round, const std::string& slot) {
  return std::string(kElasticRoundKey) + "/" + std::to_string(round) + "/slot/" + slot;
}

std::string elastic_update_key(long long seq) { return "hvdrun/elastic/update/" + std::to_string(seq); }

namespace {

// The space-separated decimals of `value`, `n` of them, each within [min, max].
Result<std::vector<long long>> decimals(const std::string& value, size_t n, const char* what, long long max) {
  std::vector<long long> out;
  for (const auto& word : split(value, ' ')) {
    if (word.empty()) continue;
    auto v = parse_int(word, what, 0, max);
    if (!v) return with_kind(v.error(), ErrorKind::kMalformed);
    out.push_back(*v);
  }
  if (out.size() != n)
    return make_error(ErrorKind::kMalformed, std::string(what) + " '" + value + "': expected " + std::to_string(n) +
                                                 " numbers");
  return out;
}

}  // namespace

Result<SlotNumbers> parse_slot_numbers(const std::string& value) {
  SlotNumbers s;
  if (value == "removed") {
    s.removed = true;
    return s;
  }
  auto v = decimals(value, 6, "elastic slot", 1 << 24);
  if (!v) return v.error();
  s.rank = int((*v)[0]), s.size = int((*v)[1]), s.local_rank = int((*v)[2]);
  s.local_size = int((*v)[3]), s.cross_rank = int((*v)[4]), s.cross_size = int((*v)[5]);
  if (s.size < 1 || s.rank >= s.size || s.local_rank >= s.local_size || s.cross_rank >= s.cross_size)
    return make_error(ErrorKind::kMalformed, "elastic slot '" + value + "': inconsistent numbers");
  return s;
}

Result<ElasticUpdate> parse_elastic_update(const std::string& value) {
  auto v = decimals(value, 2, "elastic update", 1ll << 40);
  if (!v) return v.error();
  return ElasticUpdate{static_cast<int>((*v)[0] & 3), (*v)[1]};
}

ElasticWatcher::ElasticWatcher(rdv::Client client, long long round, long long formed_seq, long long after_seq,
                               ElasticCounters* counters, std::function<void(long long)> on_end)
    : client_(std::move(client)),
      round_(round),
      formed_seq_(formed_seq),
      next_seq_(after_seq + 1),
      counters_(counters),
      on_end_(std::move(on_end)) {
  thread_ = std::thread([this] { run(); });
}

ElasticWatcher::~ElasticWatcher() {
  stopping_ = true;
  client_.shut_down();
  if (thread_.joinable()) thread_.join();
}

void ElasticWatcher::run() {
  // A long wait, asked again when it runs out: the server holds it, so that an update
  // reaches this process as soon as it is written.
  constexpr double kWaitS = 3600;
  while (!stopping_) {
    auto w = client_.wait({elastic_update_key(next_seq_)}, kWaitS);
    if (!w && w.error().kind == ErrorKind::kTimeout && !stopping_) continue;
    if (!w || !take(next_seq_)) break;
    ++next_seq_;
  }
}

bool ElasticWatcher::take(long long seq) {
  auto value = client_.get(elastic_update_key(seq));
  if (!value) return false;
  auto u = parse_elastic_update(*value);
  if (!u) {
    spdlog::warn("elastic: {}: ignored", u.error().message);
    return true;
  }
  if (seq > formed_seq_) counters_->kinds.fetch_or(u->kinds);
  counters_->seq.store(seq);
  if (u->ended_round == round_ && on_end_) {
    on_end_(seq);
    on_end_ = nullptr;
  }
  return true;
}

}  // namespace hvdrun
