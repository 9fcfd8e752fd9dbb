#include "collectives/hierarchy.h"

#include <map>

#include "common/deadline.h"
#include "common/tunables.h"
#include "hvdrun/hvdrun.h"

namespace hvdrun {

HostLayout host_layout(const std::vector<std::string>& host_of_rank) {
  HostLayout h;
  std::map<std::string, int> index;
  std::vector<std::vector<int>> members;
  for (size_t r = 0; r < host_of_rank.size(); ++r) {
    auto [it, fresh] = index.emplace(host_of_rank[r], static_cast<int>(members.size()));
    if (fresh) members.emplace_back();
    h.host_of.push_back(it->second);
    h.local_of.push_back(static_cast<int>(members[it->second].size()));
    members[it->second].push_back(static_cast<int>(r));
  }
  h.hosts = static_cast<int>(members.size());
  h.per_host = members.empty() ? 0 : static_cast<int>(members[0].size());
  for (auto& m : members)
    if (static_cast<int>(m.size()) != h.per_host) h.per_host = 0;
  if (h.per_host)
    for (auto& m : members) h.rank_of.insert(h.rank_of.end(), m.begin(), m.end());
  return h;
}

namespace {

Result<Want> wanted(const char* hvdrun_name, const char* horovod_name) {
  std::string v = tunable_string(hvdrun_name);
  const char* from = hvdrun_name;
  if (v.empty()) {
    v = tunable_string(horovod_name);
    from = horovod_name;
  }
  if (v.empty() || v == "auto") return Want::kAuto;
  if (v == "1" || v == "true") return Want::kOn;
  if (v == "0" || v == "false") return Want::kOff;
  return make_error(ErrorKind::kInvalidArgument, std::string(from) + "='" + v + "': expected auto, 1 or 0");
}

}  // namespace

Result<HierarchyWanted> hierarchy_from_tunables() {
  auto ar = wanted("HVDRUN_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE");
  if (!ar) return ar.error();
  auto ag = wanted("HVDRUN_HIERARCHICAL_ALLGATHER", "HOROVOD_HIERARCHICAL_ALLGATHER");
  if (!ag) return ag.error();
  return HierarchyWanted{*ar, *ag};
}

Status attach_hierarchy(Ring& global, const HierarchySetup& s, HierarchyWanted wanted) {
  auto deadline = deadline_in(s.timeout_s);
  auto err = [&](const std::string& m, ErrorKind kind = ErrorKind::kPeerLost) {
    return make_error(kind, "rank " + std::to_string(s.rank) + ": hierarchical collectives: " + m);
  };
  std::vector<std::string> hosts(s.size);
  for (int r = 0; r < s.size; ++r) {
    auto p = s.store->peer(r, deadline);
    if (!p) return err("rank " + std::to_string(r) + "'s address: " + p.error().message, lookup_kind(p.error()));
    hosts[r] = p->host;
  }
  HostLayout h = host_layout(hosts);
  if (h.hosts < 2 || h.per_host < 2) {
    if (h.per_host == 0 && (wanted.allreduce == Want::kOn || wanted.allgather == Want::kOn))
      return err("the hosts have different numbers of ranks (set HVDRUN_HIERARCHICAL_ALLREDUCE and "
                 "HVDRUN_HIERARCHICAL_ALLGATHER to auto or 0)", ErrorKind::kInvalidArgument);
    return {};  // one host, one rank per host, or uneven hosts under auto: the flat ring
  }
  HierarchyOptions which{wanted.allreduce != Want::kOff, wanted.allgather != Want::kOff};
  const int L = h.per_host, C = h.hosts, l = h.local_of[s.rank], c = h.host_of[s.rank];
  auto ring_of = [&](const char* name, int index, int size, int right, int left) {
    const std::string gen = s.generation.empty() ? "" : s.generation + "/";
    return connect_subring(s, "hierarchy/" + gen + name, index, size, right, left);
  };
  auto local = ring_of("local", l, L, h.rank_of[c * L + (l + 1) % L], h.rank_of[c * L + (l + L - 1) % L]);
  if (!local) return local.error();
  auto cross = ring_of("cross", c, C, h.rank_of[((c + 1) % C) * L + l], h.rank_of[((c + C - 1) % C) * L + l]);
  if (!cross) return cross.error();
  global.set_hierarchy(std::move(*local), std::move(*cross), h.rank_of, which);
  return {};
}

}  // namespace hvdrun
