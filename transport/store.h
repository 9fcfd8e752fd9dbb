// What the collectives' set-up needs of a job's shared store: keys every rank can set and
// wait for, named barriers, and every rank's data-plane address. Gloo's model
// (gloo/rendezvous/store.h): the transport and the collectives know this interface, not
// the protocol behind it. hvdrun's rendezvous client is one (collectives/rendezvous_store.h),
// transport/memory_store.h another, for tests with ranks as threads.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/result.h"
#include "transport/pair.h"

namespace hvdrun::transport {

class Store {
 public:
  virtual ~Store() = default;
  virtual Status set(const std::string& key, const std::string& value) = 0;
  // Absent: an error.
  virtual Result<std::string> get(const std::string& key) = 0;
  // Until every key is set; past timeout_s an error of kind kTimeout (sys_errno ETIMEDOUT).
  virtual Status wait(const std::vector<std::string>& keys, double timeout_s) = 0;
  // Returns when `n` participants have called it with the same name; past timeout_s an
  // error of kind kTimeout (sys_errno ETIMEDOUT). Give each use its own name: the
  // rendezvous keeps a barrier done (a later call with its name returns at once).
  virtual Status barrier(const std::string& name, int n, double timeout_s) = 0;
  // Rank `rank`'s data-plane address (as it registered it), waiting for it until `deadline`.
  virtual Result<PeerAddress> peer(int rank, std::chrono::steady_clock::time_point deadline) = 0;
};

}  // namespace hvdrun::transport
