// Negotiation: every rank's cycle message in, the responses every rank runs out, in the
// same order on every rank, without a coordinator (Horovod's controller, minus the
// transport). Pure: no ring, no threads, no clock (the caller passes the time).
//
// A name is ready when every rank that has not joined has announced it (in full, or by its
// cache bit). Cached responses come first, by cache id; then the names announced in full,
// in the order they were first announced. A name whose ranks disagree, that some rank
// refused, or that cannot run while ranks have joined, is a response with an error.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/engine/cycle_message.h"
#include "collectives/engine/response_cache.h"
#include "common/result.h"

namespace hvdrun {

struct Response {
  std::string name;
  Spec spec;
  std::vector<Spec> per_rank;  // row-shaped kinds: every rank's spec
  Status status;
  bool from_cache = false;
};

// What one cycle decided: the cached responses run first, then the others. Kept from cycle
// to cycle by its user (the vectors keep their capacity).
struct NegotiationResult {
  std::vector<size_t> cached;        // ids of cached names ready on every active rank, ascending
  std::vector<Response> responses;   // names announced in full now ready, in announcement order
  std::vector<std::string> dropped;  // cached names invalidated in this cycle
  int active = 0;                    // ranks that have not joined
  uint64_t misses = 0;               // names announced in full for the first time
  uint64_t invalidations = 0;        // cached names dropped
  void clear() {
    cached.clear();
    responses.clear();
    dropped.clear();
    active = 0;
    misses = invalidations = 0;
  }
};

class Negotiation {
 public:
  // A name announced in full by some ranks, not yet by all.
  struct Entry {
    uint64_t seq = 0;
    double first = 0;  // when first announced
    std::vector<std::optional<Spec>> per_rank;
  };
  // A cached name some ranks have sent and others not: since when, and the ranks missing.
  using Partial = std::pair<double, std::vector<int>>;

  // `cache` outlives the negotiation; it drops the names invalidated here.
  Negotiation(int size, ResponseCache* cache);
  // One cycle: every rank's message (in rank order), at time `now`. Clears *out first.
  void run(const std::vector<CycleMessage>& msgs, double now, NegotiationResult* out);

  const std::map<std::string, Entry>& table() const { return table_; }
  const std::map<std::string, Partial>& cached_partial() const { return cached_partial_; }
  bool joined(int r) const { return joined_[static_cast<size_t>(r)]; }
  int last_joined() const { return last_joined_; }
  // Every rank has joined: the join is over and the ranks take part again.
  void end_join() { joined_.assign(static_cast<size_t>(size_), false); }

 private:
  void apply_joins(const std::vector<CycleMessage>& msgs, NegotiationResult* out);
  void apply_invalidations(const std::vector<CycleMessage>& msgs, NegotiationResult* out);
  int sent_by_active(const std::vector<CycleMessage>& msgs, size_t id) const;
  void prune_partial(const std::vector<CycleMessage>& msgs);
  void cached_ready(const std::vector<CycleMessage>& msgs, double now, NegotiationResult* out);
  void cached_id(const std::vector<CycleMessage>& msgs, size_t id, double now, NegotiationResult* out);
  void announce(const std::vector<CycleMessage>& msgs, double now, NegotiationResult* out);
  void table_ready(NegotiationResult* out);
  Response respond(const std::string& name, const Entry& e, int active) const;

  int size_;
  ResponseCache* cache_;
  std::vector<bool> joined_;
  int last_joined_ = -1;
  std::map<std::string, Entry> table_;  // names announced in full, not yet ready
  uint64_t next_seq_ = 0;
  std::map<std::string, Partial> cached_partial_;
};

// The mismatch of a name's specs (null: a rank that did not announce it): for the first
// field that differs, each value with the ranks that gave it; "" when they agree.
std::string describe_mismatch(const std::string& name, const std::vector<const Spec*>& specs);

}  // namespace hvdrun
