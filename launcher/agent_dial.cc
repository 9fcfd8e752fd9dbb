#include "launcher/agent_dial.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>
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

namespace {

// hvdrun's addresses in the order they are tried: those on a network this host shares,
// then the others, loopback only when this host shares hvdrun's network stack.
std::vector<std::string> addresses_to_try(const std::string& list) {
  auto mine = interface_addresses();
  std::vector<InterfaceAddress> own = mine ? *mine : std::vector<InterfaceAddress>{};
  bool same_stack = !tunable_string("HVDRUN_AGENT_STACK").empty() && tunable_string("HVDRUN_AGENT_STACK") == network_stack_id();
  std::vector<std::string> near, far;
  for (const auto& addr : split(list, ',')) {
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
  return near;
}

// One round: each address once, each try at most 3 s (and not past `deadline`); the first
// that answers, or nothing with `tried` saying why each did not.
std::optional<std::pair<UniqueFd, std::string>> one_round(const std::vector<std::string>& addrs, int port,
                                                          std::chrono::steady_clock::time_point deadline,
                                                          std::string& tried) {
  tried.clear();
  for (const auto& addr : addrs) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) continue;
    auto fd = connect_tcp(reinterpret_cast<sockaddr*>(&sa), sizeof sa, std::min(deadline_in(3), deadline));
    if (fd) return std::make_pair(std::move(*fd), addr);
    tried += (tried.empty() ? "" : ", ") + addr + " (" + fd.error().message + ")";
  }
  return std::nullopt;
}

}  // namespace

// Rounds over every address until one answers or `deadline` passes, with a pause between
// rounds (100 ms doubling to 1 s): a link that flaps while the agents start, a refusal
// from a listener not yet there, is tried again within the start timeout (one round used
// to be all, and one lost packet failed the job); then the job's token proven (kAttach).
Result<UniqueFd> dial_launcher(const std::string& spec, const std::string& node,
                               std::chrono::steady_clock::time_point deadline, const std::function<void()>& on_retry) {
  auto parts = split(spec, ' ');
  if (parts.size() != 2) return make_error(ErrorKind::kMalformed,
                                           "HVDRUN_AGENT_CONNECT '" + spec + "': expected 'PORT ADDR,...'");
  auto port = parse_int(parts[0], "HVDRUN_AGENT_CONNECT port", 1, 65535);
  if (!port) return port.error();
  std::vector<std::string> addrs = addresses_to_try(parts[1]);
  std::string tried;
  auto pause = std::chrono::milliseconds(100);
  while (true) {
    auto got = one_round(addrs, static_cast<int>(*port), deadline, tried);
    if (got) {
      int fl = fcntl(got->first.get(), F_GETFL);
      fcntl(got->first.get(), F_SETFL, fl & ~O_NONBLOCK);
      AgentAttach att;
      att.token = tunable_string("HVDRUN_AGENT_TOKEN");
      att.task = static_cast<int>(tunable_int("SLURM_PROCID"));
      att.node = node;
      if (!write_all(got->first.get(), agentwire::encode(Type::kAttach, encode_attach(att))))
        return make_error(ErrorKind::kPeerLost, "lost the connection to hvdrun at " + got->second);
      return std::move(got->first);
    }
    if (addrs.empty() || ms_until(deadline) <= 0) break;
    if (on_retry) on_retry();
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - std::chrono::steady_clock::now()));
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
  return make_error(ErrorKind::kSystem, "cannot reach hvdrun on port " + parts[0] + " at any of its addresses " +
                    "within the start timeout: " + (tried.empty() ? "none usable from here" : tried));
}

}  // namespace hvdrun
