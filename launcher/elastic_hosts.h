// The hosts of an elastic job whose workers run through an agent (not this machine), as the
// driver (elastic_driver.h) sees them: hvdrun's are elastic_remote.h's, a test's a fake.
// The workers' spawns, signals and ends go through the driver's ProcessRunner (a remote
// worker's through its host's agent); this says which hosts are remote, starts the agent
// of a host that discovery names for the first time (in the background: the driver's loop
// never waits for it), and how each agent's link is.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace hvdrun {

class ElasticHosts {
 public:
  virtual ~ElasticHosts() = default;
  // Whether `host`'s workers run through an agent.
  virtual bool remote(const std::string& host) const = 0;
  // Starts `host`'s agent unless it runs or is being started (its connection, the
  // pre-flight check of its hello, its job: up to the start time-out), on a thread of its
  // own: never blocks. True while it is being started (opened() tells how that ended; the
  // driver's wait wakes then), false when it runs.
  virtual bool open(const std::string& host) = 0;
  struct Opened {
    std::string host;
    Status status;  // its error names the host
  };
  // The starts that ended since the last call, each told once; a started agent runs.
  virtual std::vector<Opened> opened() = 0;
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
