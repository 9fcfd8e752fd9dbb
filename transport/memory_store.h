// A Store in one process's memory (transport/store.h), shared by ranks run as threads: what
// tests give the collectives' set-up instead of a rendezvous server.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "transport/store.h"

namespace hvdrun::transport {

class MemoryStore : public Store {
 public:
  // What peer(rank) returns (the rendezvous' registration).
  void add_peer(const PeerAddress& address);

  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key) override;
  Status wait(const std::vector<std::string>& keys, double timeout_s) override;
  Status barrier(const std::string& name, int n, double timeout_s) override;
  Result<PeerAddress> peer(int rank, std::chrono::steady_clock::time_point deadline) override;

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
  std::map<std::string, long> arrivals_;  // barrier name -> calls so far
  std::map<int, PeerAddress> peers_;
};

}  // namespace hvdrun::transport
