// The worker's side of an elastic job (docs/ELASTIC.md, written by hvdrun): the store keys
// that say which round is the newest, each slot's numbers in a round, and the membership
// changes; the watcher thread that follows the changes and ends this process's round when
// one ends it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/result.h"
#include "rendezvous/client.h"

namespace hvdrun {

constexpr const char* kElasticRoundKey = "hvdrun/elastic/round";
// "hvdrun/elastic/round/<round>/slot/<slot>"
std::string elastic_slot_key(long long round, const std::string& slot);
// "hvdrun/elastic/update/<seq>"
std::string elastic_update_key(long long seq);

// A slot's value in a round: "rank size local_rank local_size cross_rank cross_size", or
// "removed".
struct SlotNumbers {
  bool removed = false;
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
};
Result<SlotNumbers> parse_slot_numbers(const std::string& value);

// An update's value: "<kinds> <ended_round>" (ended_round 0: the running round goes on).
struct ElasticUpdate {
  int kinds = 0;
  long long ended_round = 0;
};
Result<ElasticUpdate> parse_elastic_update(const std::string& value);

// What hvd_elastic_updates answers: the newest update this process was told of, and the
// kinds of every update after the one that formed its round. Written by the watcher,
// read by any thread; kept across hvd_shutdown for the next hvd_init.
struct ElasticUpdates {
  long long seq = 0;
  int kinds = 0;
};
struct ElasticCounters {
  std::atomic<long long> seq{0};
  std::atomic<int> kinds{0};
};

// Follows hvdrun/elastic/update/<seq> over a connection of its own, from the update after
// `after_seq` on. Each update goes into `counters` (kinds: those after `formed_seq`, the
// update that formed `round`); one whose ended_round is `round` calls on_end (on the
// watcher's thread, once). A lost connection ends the watching (the job is over).
class ElasticWatcher {
 public:
  ElasticWatcher(rdv::Client client, long long round, long long formed_seq, long long after_seq,
                 ElasticCounters* counters, std::function<void(long long seq)> on_end);
  ~ElasticWatcher();  // shuts its connection down and joins the thread
  ElasticWatcher(const ElasticWatcher&) = delete;
  ElasticWatcher& operator=(const ElasticWatcher&) = delete;

 private:
  void run();
  bool take(long long seq);  // reads and applies update `seq`; false: stop watching

  rdv::Client client_;
  const long long round_, formed_seq_;
  long long next_seq_;
  ElasticCounters* counters_;
  std::function<void(long long)> on_end_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace hvdrun
