// `hvdrun --agent`: what runs on a remote host, started over SSH by the launcher. It reads
// the job from stdin (never from its command line), starts that host's ranks with the same
// LocalAgent as a local launch, and streams their output and exits back on stdout. EOF on
// stdin (hvdrun died, or the SSH connection dropped) ends every worker on the host.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/agent_wire.h"

namespace hvdrun {

// What the launcher sends an agent (kJob), as JSON.
struct AgentJob {
  std::string host;  // as written in -H, for messages
  std::string cwd;
  double kill_grace = 5;
  double heartbeat_timeout = 30;  // HVDRUN_HEARTBEAT_TIMEOUT
  bool stdin_to_rank0 = false;    // rank 0 is here and hvdrun relays its stdin (kStdin)
  struct Rank {
    int rank = 0;
    std::vector<std::string> argv, env;
  };
  std::vector<Rank> ranks;
};
std::string encode_job(const AgentJob& job);
Result<AgentJob> decode_job(const std::string& json);

// What an agent tells the launcher first (kHello): how the host sees the SSH connection.
struct AgentHello {
  std::string launcher_addr;  // SSH_CONNECTION's client address: the launcher, as seen from here
  std::string host_addr;      // SSH_CONNECTION's server address: this host's reachable address
  std::string host_iface;     // the interface holding host_addr
  int free_port = 0;          // a port free on this host (MASTER_PORT when rank 0 is here)
  std::string version;
};
std::string encode_hello(const AgentHello& h);
Result<AgentHello> decode_hello(const std::string& json);

// The agent's main; returns its exit code.
int run_agent_mode();

}  // namespace hvdrun
