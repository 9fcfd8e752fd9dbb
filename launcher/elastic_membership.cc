#include "launcher/elastic_membership.h"

#include <algorithm>
#include <set>

namespace hvdrun {

std::vector<HostSlots> host_order(const std::vector<ElasticSlot>& current, const std::vector<HostSlots>& available) {
  std::vector<HostSlots> order;
  auto slots_of = [&](const std::string& host) {
    auto it = std::find_if(available.begin(), available.end(), [&](const HostSlots& h) { return h.host == host; });
    return it == available.end() ? 0 : it->slots;
  };
  std::set<std::string> placed;
  for (const auto& s : current)
    if (placed.insert(s.host).second && slots_of(s.host) > 0) order.push_back({s.host, slots_of(s.host)});
  for (const auto& h : available)
    if (h.slots > 0 && placed.insert(h.host).second) order.push_back(h);
  return order;
}

ElasticRound next_round(const std::vector<ElasticSlot>& current, const std::vector<HostSlots>& available, int max_np) {
  ElasticRound round;
  std::vector<HostSlots> hosts = host_order(current, available);
  long long total = total_slots(hosts);
  if (max_np > 0) total = std::min<long long>(total, max_np);
  if (total > 0) {
    auto ranks = assign_ranks(hosts, static_cast<int>(std::min<long long>(total, kMaxJobRanks)));
    if (ranks) round.ranks = std::move(*ranks);
  }
  std::set<ElasticSlot> before(current.begin(), current.end()), after;
  for (const auto& r : round.ranks) {
    ElasticSlot s{r.host, r.local_rank};
    round.slots.push_back(s);
    after.insert(s);
    (before.count(s) ? round.kept : round.spawned).push_back(s);
  }
  for (const auto& s : current)
    if (!after.count(s)) round.removed.push_back(s);
  return round;
}

}  // namespace hvdrun
