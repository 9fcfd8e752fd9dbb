// The JSON messages between hvdrun and `hvdrun --agent` (carried in agent_wire frames).
// Pure: no I/O.
#pragma once

#include <string>
#include <vector>

#include "common/net.h"
#include "common/result.h"

namespace hvdrun {

// What the launcher sends an agent (kJob).
struct AgentJob {
  std::string host;  // as written in -H (or the Slurm node), for messages
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

// What an agent tells the launcher first (kHello): what it is and the addresses it has,
// whichever way it was started (never what SSH says).
struct AgentHello {
  std::string version;
  std::string node;           // its host name (Slurm: SLURMD_NODENAME)
  std::string network_stack;  // network_stack_id(): equal ones reach each other on loopback
  std::vector<InterfaceAddress> ifaces;  // every address of every interface it has
  int free_port = 0;          // a port free on this host (MASTER_PORT when rank 0 is here)
  // Set when the connection itself says (the agent dialed back to hvdrun, or libssh's
  // socket): the launcher's address as this host reached it, and this host's.
  std::string launcher_addr, host_addr;
};
std::string encode_hello(const AgentHello& h);
Result<AgentHello> decode_hello(const std::string& json);

// The first frame of an agent that dialed back to hvdrun (kAttach): the one-job token it
// was given and which of the started agents it is.
struct AgentAttach {
  std::string token;  // hex
  int task = -1;      // srun's SLURM_PROCID: the index of its node in the launch
  std::string node;
};
std::string encode_attach(const AgentAttach& a);
Result<AgentAttach> decode_attach(const std::string& json);

}  // namespace hvdrun
