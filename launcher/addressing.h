// Which addresses a job uses, without guessing (pure): the rendezvous listens on
// --network-interface's address, else on the address the remote hosts reached this
// machine at (their agents report SSH_CONNECTION), else on loopback for a local job.
// MASTER_ADDR is rank 0's host's address; each host's data plane uses its own interface
// on that network.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/remote_agent.h"

namespace hvdrun {

struct RemoteView {
  std::string host;  // as written in -H
  AgentHello hello;
};

struct HostAddressing {
  std::string rendezvous_addr;  // where this host's ranks reach the rendezvous
  std::string iface;            // HVDRUN_IFACE / NCCL_SOCKET_IFNAME there ("" : none)
};

struct Addressing {
  std::string bind_addr;    // the rendezvous server's
  std::string master_addr;  // rank 0's host
  int master_port = 0;      // 0: rank 0 is here; pick a port free here
  HostAddressing local;     // this machine's ranks
  std::map<std::string, HostAddressing> remote;
};

// iface/iface_addr: --network-interface and its address ("" when not given).
// iface_of_addr: the interface holding an address of this machine ("" when none).
Result<Addressing> plan_addressing(const std::string& iface, const std::string& iface_addr,
                                   const std::vector<RemoteView>& remotes, const std::string& rank0_host,
                                   const std::function<std::string(const std::string&)>& iface_of_addr);

}  // namespace hvdrun
