#include "launcher/elastic_round.h"

#include <cstdio>
#include <set>

namespace hvdrun {
namespace {

constexpr int kHostsAdded = 1;    // HVD_HOSTS_ADDED (include/hvdrun/hvdrun.h)
constexpr int kHostsRemoved = 2;  // HVD_HOSTS_REMOVED

std::string round_prefix(int n) { return "hvdrun/elastic/round/" + std::to_string(n) + "/slot/"; }

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.1f" : "%.0f", s);
  return buf;
}

}  // namespace

std::string slot_name(const ElasticSlot& s) { return s.host + ":" + std::to_string(s.index); }

StoreEntries round_keys(int n, const ElasticRound& r) {
  StoreEntries out;
  for (size_t i = 0; i < r.slots.size() && i < r.ranks.size(); ++i) {
    const RankInfo& k = r.ranks[i];
    out.emplace_back(round_prefix(n) + slot_name(r.slots[i]),
                     std::to_string(k.rank) + " " + std::to_string(k.size) + " " + std::to_string(k.local_rank) + " " +
                         std::to_string(k.local_size) + " " + std::to_string(k.cross_rank) + " " +
                         std::to_string(k.cross_size));
  }
  for (const auto& s : r.removed) out.emplace_back(round_prefix(n) + slot_name(s), "removed");
  out.emplace_back("hvdrun/elastic/round", std::to_string(n));
  return out;
}

RoundChange round_change(const ElasticRound& r, bool failure, int old_round) {
  RoundChange c;
  if (!r.spawned.empty()) c.kinds |= kHostsAdded;  // new hosts, or more slots on one
  if (!r.removed.empty()) c.kinds |= kHostsRemoved;
  c.ended_round = failure || !r.removed.empty() ? old_round : 0;
  return c;
}

std::pair<std::string, std::string> update_entry(long long seq, const RoundChange& c) {
  return {"hvdrun/elastic/update/" + std::to_string(seq), std::to_string(c.kinds) + " " + std::to_string(c.ended_round)};
}

std::vector<std::string> elastic_worker_env(int n, const ElasticSlot& s) {
  return {"HVDRUN_ELASTIC=1", "HOROVOD_ELASTIC=1", "HVDRUN_ELASTIC_ROUND=" + std::to_string(n),
          "HVDRUN_ELASTIC_SLOT=" + slot_name(s)};
}

std::string reset_line(const ResetFacts& f) {
  std::string line = "reset " + std::to_string(f.number) + ": " + f.cause;
  for (const auto& [host, cooldown] : f.blacklisted)
    line += ", host " + host + " blacklisted " + (cooldown ? "for " + seconds_text(*cooldown) + " s" : "for good");
  line += "; size " + std::to_string(f.old_size) + " -> " + std::to_string(f.new_size);
  if (f.commit) line += "; restored commit " + std::to_string(*f.commit);
  else if (!f.no_commit.empty()) line += "; " + f.no_commit;
  line += "; " + seconds_text(f.seconds) + " s";
  return line;
}

std::string hosts_of(const std::vector<ElasticSlot>& slots) {
  std::string out;
  std::set<std::string> seen;
  for (const auto& s : slots)
    if (seen.insert(s.host).second) out += (out.empty() ? "" : ",") + s.host;
  return out;
}

}  // namespace hvdrun
