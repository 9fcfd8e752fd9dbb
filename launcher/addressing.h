// Which addresses a job uses, without guessing and without asking SSH (pure). Every agent
// reports the addresses it has (and, when its connection says, the two ends of it); the
// launcher pairs each host with an address of this machine on a network they share:
//   1. --network-interface: its address, everywhere;
//   2. the connection's own ends, when known (an agent that dialed back, libssh's socket);
//   3. an address of this machine and one of the host's on the same subnet;
//   4. loopback, when the agent shares this machine's network stack.
// The rendezvous listens on the one launcher address every host can use (else on all).
// MASTER_ADDR is rank 0's host's address; each host's data plane uses its own interface.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/result.h"
#include "launcher/agent_messages.h"

namespace hvdrun {

struct RemoteView {
  std::string host;  // as written in -H (or the Slurm node)
  AgentHello hello;
};

struct HostAddressing {
  std::string rendezvous_addr;  // where this host's ranks reach the rendezvous
  std::string host_addr;        // the host's own address on that network
  std::string iface;            // HVDRUN_IFACE / NCCL_SOCKET_IFNAME there ("" : none)
  std::string gloo_iface;       // the interface holding host_addr there (HOROVOD_GLOO_IFACE; "" : unknown)
};

struct Addressing {
  std::string bind_addr;    // the rendezvous server's
  std::string master_addr;  // rank 0's host
  int master_port = 0;      // 0: rank 0 is here; pick a port free here
  HostAddressing local;     // this machine's ranks
  std::map<std::string, HostAddressing> remote;
};

struct AddressingInput {
  std::string iface, iface_addr;                // --network-interface and its address, or ""
  std::vector<InterfaceAddress> local_ifaces;   // this machine's addresses
  std::string local_stack;                      // network_stack_id() here
  std::vector<RemoteView> remotes;
  std::string rank0_host;
};

Result<Addressing> plan_addressing(const AddressingInput& in);

// The addresses the job's hosts may connect from (hvdrun --horovod's allow-list, besides
// loopback): this machine's, and each remote agent's interfaces and its end of the
// launcher's connection. Deduplicated, in order.
std::vector<std::string> job_peer_addresses(const AddressingInput& in);

}  // namespace hvdrun
