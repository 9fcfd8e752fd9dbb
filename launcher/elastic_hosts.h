// The hosts of an elastic job whose workers run through an agent (not this machine), as the
// driver (elastic_driver.h) sees them: hvdrun's are elastic_remote.h's, a test's a fake.
// The workers' spawns, signals and ends go through the driver's ProcessRunner (a remote
// worker's through its host's agent); this says which hosts are remote, starts the agent
// of a host that discovery names for the first time, and how each agent's link is.
#pragma once

#include <optional>
#include <string>

#include "common/result.h"

namespace hvdrun {

class ElasticHosts {
 public:
  virtual ~ElasticHosts() = default;
  // Whether `host`'s workers run through an agent.
  virtual bool remote(const std::string& host) const = 0;
  // `host`'s agent, started unless it runs (its connection, the pre-flight check of its
  // hello, its job): blocks up to the start time-out. The error names the host.
  virtual Status open(const std::string& host) = 0;
  struct Liveness {
    double heard = 0;                    // when its agent was last heard from (the runner's clock)
    std::optional<std::string> dropped;  // why its link is gone
  };
  virtual Liveness liveness(const std::string& host) = 0;
  // The link to `host`'s agent closed (the host lost): the agent ends its workers.
  virtual void close(const std::string& host) = 0;
  // HVDRUN_HEARTBEAT_TIMEOUT: an agent silent this long is lost.
  virtual double heartbeat_timeout() const = 0;
};

}  // namespace hvdrun
