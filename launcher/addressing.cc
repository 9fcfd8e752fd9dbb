#include "launcher/addressing.h"

#include <algorithm>

#include "launcher/plan.h"

namespace hvdrun {
namespace {

bool usable(const InterfaceAddress& a) {
  if (a.v6) return a.addr != "::1" && a.addr.rfind("fe80", 0) != 0;  // no loopback, no link-local
  return a.addr.rfind("127.", 0) != 0;
}

std::string iface_holding(const std::vector<InterfaceAddress>& ifaces, const std::string& addr) {
  for (const auto& a : ifaces)
    if (a.addr == addr) return a.iface;
  return "";
}

std::string list(const std::vector<InterfaceAddress>& ifaces) {
  std::string s;
  for (const auto& a : ifaces) {
    if (!usable(a)) continue;
    s += (s.empty() ? "" : ", ") + a.addr + "/" + std::to_string(a.prefix);
  }
  return s.empty() ? "none but loopback" : s;
}

struct Pair {
  std::string launcher, host;
};

// Every (launcher address, host address) this host can use, best first.
Result<std::vector<Pair>> candidates(const AddressingInput& in, const RemoteView& r) {
  const AgentHello& h = r.hello;
  if (!h.launcher_addr.empty() && !h.host_addr.empty()) return std::vector<Pair>{{h.launcher_addr, h.host_addr}};
  std::vector<Pair> out;
  for (const auto& l : in.local_ifaces) {
    if (!usable(l)) continue;
    for (const auto& a : h.ifaces)
      if (usable(a) && a.v6 == l.v6 && same_subnet(l.addr, a.addr, std::min(l.prefix, a.prefix)))
        out.push_back({l.addr, a.addr});
  }
  if (out.empty() && !h.network_stack.empty() && h.network_stack == in.local_stack)
    out.push_back({"127.0.0.1", "127.0.0.1"});
  if (out.empty())
    return error_of(ErrorKind::kLaunchFailed, "cannot tell which address of this machine " + r.host +
                          " reaches: no network in common (its addresses: " + list(h.ifaces) +
                          "; this machine's: " + list(in.local_ifaces) + "); pass --network-interface");
  return out;
}

// One launcher address every host can use (in this machine's order of preference); ""
// when there is none.
std::string common_launcher_address(const std::vector<std::vector<Pair>>& cands) {
  std::string common;
  if (!cands.empty())
    for (const auto& p : cands[0]) {
      bool everywhere = std::all_of(cands.begin(), cands.end(), [&](const std::vector<Pair>& c) {
        return std::any_of(c.begin(), c.end(), [&](const Pair& q) { return q.launcher == p.launcher; });
      });
      if (everywhere) {
        common = p.launcher;
        break;
      }
    }
  return common;
}

// The addresses of one remote host's ranks: on --network-interface when given, else the
// pair that uses `common` (else its best).
Result<HostAddressing> remote_addressing(const AddressingInput& in, const RemoteView& r, const std::vector<Pair>& cand,
                                         const std::string& common) {
  HostAddressing h;
  if (!in.iface_addr.empty()) {
    h.rendezvous_addr = in.iface_addr;
    h.iface = in.iface;
    for (const auto& x : r.hello.ifaces)
      if (x.iface == in.iface && (h.host_addr.empty() || !x.v6)) h.host_addr = x.addr;
    if (h.host_addr.empty() && !cand.empty()) h.host_addr = cand[0].host;
    if (h.host_addr.empty())
      return error_of(ErrorKind::kLaunchFailed, "host " + r.host + " has no address on --network-interface " + in.iface +
                            " (its addresses: " + list(r.hello.ifaces) + ")");
  } else {
    Pair p = cand[0];
    for (const auto& q : cand)
      if (q.launcher == common) {
        p = q;
        break;
      }
    h.rendezvous_addr = p.launcher;
    h.host_addr = p.host;
    h.iface = iface_holding(r.hello.ifaces, p.host);
  }
  h.gloo_iface = !h.iface.empty() ? h.iface : iface_holding(r.hello.ifaces, h.host_addr);
  return h;
}

}  // namespace

Result<Addressing> plan_addressing(const AddressingInput& in) {
  Addressing a;
  a.bind_addr = a.master_addr = a.local.rendezvous_addr = a.local.host_addr = "127.0.0.1";
  std::vector<std::vector<Pair>> cands;
  for (const auto& r : in.remotes) {
    auto c = candidates(in, r);
    if (!c) {
      if (in.iface_addr.empty()) return c.error();
      c = std::vector<Pair>{};
    }
    cands.push_back(std::move(*c));
  }
  std::string common = common_launcher_address(cands);
  for (size_t i = 0; i < in.remotes.size(); ++i) {
    auto h = remote_addressing(in, in.remotes[i], cands[i], common);
    if (!h) return h.error();
    a.remote[in.remotes[i].host] = *h;
  }
  if (!in.iface_addr.empty()) {
    a.bind_addr = a.local.rendezvous_addr = a.local.host_addr = a.master_addr = in.iface_addr;
    a.local.iface = in.iface;
  } else if (!in.remotes.empty()) {
    std::string reach = common.empty() ? a.remote.at(in.remotes[0].host).rendezvous_addr : common;
    a.bind_addr = common.empty() ? "0.0.0.0" : common;
    a.local.rendezvous_addr = a.local.host_addr = a.master_addr = reach;
    a.local.iface = iface_holding(in.local_ifaces, reach);
  }
  a.local.gloo_iface = !a.local.iface.empty() ? a.local.iface : iface_holding(in.local_ifaces, a.local.host_addr);
  for (const auto& r : in.remotes)
    if (r.host == in.rank0_host) {
      a.master_addr = a.remote.at(r.host).host_addr;
      a.master_port = r.hello.free_port;
    }
  return a;
}

std::vector<std::string> job_peer_addresses(const AddressingInput& in) {
  std::vector<std::string> out;
  auto add = [&out](const std::string& a) {
    if (!a.empty() && std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  };
  for (const auto& l : in.local_ifaces) add(l.addr);
  if (!in.iface_addr.empty()) add(in.iface_addr);
  for (const auto& r : in.remotes) {
    for (const auto& a : r.hello.ifaces) add(a.addr);
    add(r.hello.host_addr);
  }
  return out;
}

}  // namespace hvdrun
