#include "launcher/blame.h"

namespace hvdrun {

namespace {

std::set<int> heard_from(const std::vector<SilenceReport>& reports, const std::set<int>& ended) {
  std::set<int> heard = ended;
  for (const auto& r : reports) heard.insert(r.rank);
  return heard;
}

}  // namespace

int silent_rank(const std::vector<SilenceReport>& reports, const std::set<int>& ended, int size) {
  std::set<int> heard = heard_from(reports, ended);
  for (const auto& r : reports)
    if (r.peer >= 0 && r.peer < size && !heard.count(r.peer)) return r.peer;
  int silent = -1, count = 0;
  for (int r = 0; r < size; ++r)
    if (!heard.count(r)) {
      silent = r;
      ++count;
    }
  if (count == 1) return silent;
  return reports.front().peer;
}

bool silence_accounted(const std::vector<SilenceReport>& reports, const std::set<int>& ended, int size) {
  std::set<int> heard = heard_from(reports, ended);
  int missing = 0;
  for (int r = 0; r < size; ++r) missing += heard.count(r) ? 0 : 1;
  return missing <= 1;
}

LostPeerVerdict lost_peer_culprit(const std::map<int, int>& lost, const std::set<int>& failed,
                                  const std::set<int>& left, const std::set<int>& exited_0, bool final) {
  LostPeerVerdict v;
  for (int rank : failed) {
    auto it = lost.find(rank);
    if (it == lost.end()) continue;
    // A peer that itself failed on a closed connection (and then exited 0, say, catching
    // the error) is not where the failure began: follow the chain to a peer that lost none.
    int peer = it->second;
    std::set<int> seen{rank};
    for (auto next = lost.find(peer); next != lost.end() && seen.insert(peer).second; next = lost.find(peer))
      peer = next->second;
    if (failed.count(peer)) continue;  // its own failure is weighed with the others
    bool known = left.count(peer) && (final || exited_0.count(peer));
    if (known && !v.culprit) v.culprit = peer;
    if (!known) v.pending = true;
  }
  if (v.culprit) v.pending = false;
  return v;
}

}  // namespace hvdrun
