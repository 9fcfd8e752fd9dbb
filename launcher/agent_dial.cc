#include "launcher/agent_dial.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <thread>

#include "common/deadline.h"
#include "common/net.h"
#include "common/socket_io.h"
#include "common/strings.h"
#include "common/tunables.h"
#include "launcher/agent_messages.h"
#include "launcher/agent_wire.h"
#include "launcher/exit_status.h"

namespace hvdrun {

using agentwire::Type;

// Started by srun: connect back to hvdrun ("PORT ADDR,ADDR,..." in HVDRUN_AGENT_CONNECT),
// trying the addresses on a network this host shares first, loopback only when this host
// shares hvdrun's network stack; then prove the job's token (kAttach).
Result<UniqueFd> dial_launcher(const std::string& spec, const std::string& node) {
  auto parts = split(spec, ' ');
  if (parts.size() != 2) return make_error(ErrorKind::kMalformed,
                                           "HVDRUN_AGENT_CONNECT '" + spec + "': expected 'PORT ADDR,...'");
  auto port = parse_int(parts[0], "HVDRUN_AGENT_CONNECT port", 1, 65535);
  if (!port) return port.error();
  auto mine = interface_addresses();
  std::vector<InterfaceAddress> own = mine ? *mine : std::vector<InterfaceAddress>{};
  bool same_stack = !tunable_string("HVDRUN_AGENT_STACK").empty() && tunable_string("HVDRUN_AGENT_STACK") == network_stack_id();
  std::vector<std::string> near, far;
  for (const auto& addr : split(parts[1], ',')) {
    if (addr.rfind("127.", 0) == 0) {
      if (same_stack) far.push_back(addr);
      continue;
    }
    bool shared = std::any_of(own.begin(), own.end(), [&](const InterfaceAddress& a) {
      return !a.v6 && a.addr.rfind("127.", 0) != 0 && same_subnet(a.addr, addr, a.prefix);
    });
    (shared ? near : far).push_back(addr);
  }
  near.insert(near.end(), far.begin(), far.end());
  std::string tried;
  for (const auto& addr : near) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(*port));
    if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) continue;
    auto fd = connect_tcp(reinterpret_cast<sockaddr*>(&sa), sizeof sa, deadline_in(3));
    if (!fd) {
      tried += (tried.empty() ? "" : ", ") + addr + " (" + fd.error().message + ")";
      continue;
    }
    int fl = fcntl(fd->get(), F_GETFL);
    fcntl(fd->get(), F_SETFL, fl & ~O_NONBLOCK);
    AgentAttach att;
    att.token = tunable_string("HVDRUN_AGENT_TOKEN");
    att.task = static_cast<int>(tunable_int("SLURM_PROCID"));
    att.node = node;
    if (!write_all(fd->get(), agentwire::encode(Type::kAttach, encode_attach(att))))
      return make_error(ErrorKind::kPeerLost, "lost the connection to hvdrun at " + addr);
    return std::move(*fd);
  }
  return make_error(ErrorKind::kSystem, "cannot reach hvdrun on port " + parts[0] + " at any of its addresses: " +
                    (tried.empty() ? "none usable from here" : tried));
}

}  // namespace hvdrun
