// Rings among some of the job's ranks (process sets, the hierarchy's rings): every rank
// meets the store's barrier, members connect, and a rank in two sets runs both sets'
// engines at once.
#include "collectives/subring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collectives/engine/engine.h"
#include "ring_fixture.h"

namespace hvdrun {
namespace {

using ringtest::HierarchyJob;

// Rank r's ring of the set `ranks` (null when r is not in it), as runtime_sets.cc connects it.
Result<std::unique_ptr<Ring>> set_ring(HierarchyJob& job, int r, const std::vector<int>& ranks, const std::string& name) {
  const int n = static_cast<int>(ranks.size());
  int i = -1;
  for (int k = 0; k < n; ++k)
    if (ranks[k] == r) i = k;
  return connect_subring(job.setup(r), name, i, n, i < 0 ? -1 : ranks[(i + 1) % n], i < 0 ? -1 : ranks[(i + n - 1) % n]);
}

TEST(Subring, MembersConnectAndReduceNonMembersOnlyMeetTheBarrier) {
  HierarchyJob job({"a", "a", "a", "a"});
  auto results = ringtest::on_all(4, [&](int r) -> std::string {
    auto ring = set_ring(job, r, {1, 3}, "set/1");
    if (!ring) return ring.error().message;
    if ((*ring != nullptr) != (r == 1 || r == 3)) return "membership";
    if (!*ring) return "";
    if ((*ring)->size() != 2 || (*ring)->rank() != (r == 1 ? 0 : 1)) return "place in the set";
    return ringtest::check_allreduce(**ring, 2, 1000, HVD_FLOAT32, HVD_OP_SUM, false);
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

TEST(Subring, ASetOfOneNeedsNoPeer) {
  HierarchyJob job({"a", "a"});
  auto results = ringtest::on_all(2, [&](int r) -> std::string {
    auto ring = set_ring(job, r, {1}, "set/one");
    if (!ring) return ring.error().message;
    return (*ring != nullptr) == (r == 1) && (!*ring || (*ring)->size() == 1) ? "" : "wrong ring";
  });
  EXPECT_EQ(results, (std::vector<std::string>{"", ""}));
}

// Two sets that share rank 3, each with its own engine: rank 3's collectives in both run at
// once (each set's engine negotiates its own names over its own ring).
TEST(Subring, ARankInTwoSetsRunsBothSetsEnginesAtOnce) {
  const std::vector<std::vector<int>> sets = {{0, 2, 3}, {1, 3}};
  HierarchyJob job({"a", "a", "a", "a"});
  auto results = ringtest::on_all(4, [&](int r) -> std::string {
    std::vector<std::unique_ptr<Ring>> rings;
    std::vector<std::unique_ptr<Engine>> engines;
    std::vector<float> data(sets.size());
    std::vector<hvd_handle_t> handles;
    for (size_t s = 0; s < sets.size(); ++s) {  // every rank connects every set, in one order
      auto ring = set_ring(job, r, sets[s], "set/" + std::to_string(s));
      if (!ring) return ring.error().message;
      if (!*ring) continue;
      EngineOptions o;
      o.rank = (*ring)->rank();
      o.size = (*ring)->size();
      engines.push_back(std::make_unique<Engine>(ring->get(), o));
      rings.push_back(std::move(*ring));
      Request q;
      q.spec.name = "x";
      q.spec.counts = {1};
      data[s] = static_cast<float>(r + 1);
      q.tensors.push_back({&data[s], &data[s]});
      auto h = engines.back()->submit(std::move(q));
      if (!h) return h.error().message;
      handles.push_back(*h);
    }
    for (size_t k = 0; k < engines.size(); ++k)
      if (auto w = engines[k]->wait(handles[k]); !w) return w.error().message;
    for (size_t s = 0; s < sets.size(); ++s) {
      float want = 0;
      for (int m : sets[s]) want += static_cast<float>(m + 1);
      const bool member = std::count(sets[s].begin(), sets[s].end(), r) > 0;
      if (member && data[s] != want) return "set " + std::to_string(s) + ": " + std::to_string(data[s]);
    }
    for (auto& e : engines) e->stop("done");
    return "";
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

}  // namespace
}  // namespace hvdrun
