#include "launcher/addressing.h"

#include "launcher/job.h"

namespace hvdrun {

Result<Addressing> plan_addressing(const std::string& iface, const std::string& iface_addr,
                                   const std::vector<RemoteView>& remotes, const std::string& rank0_host,
                                   const std::function<std::string(const std::string&)>& iface_of_addr) {
  Addressing a;
  std::string reach = "127.0.0.1";
  a.bind_addr = reach;
  if (!iface_addr.empty()) {
    reach = a.bind_addr = iface_addr;
  } else if (!remotes.empty()) {
    reach = a.bind_addr = remotes[0].hello.launcher_addr;
    for (const auto& r : remotes) {
      if (r.hello.launcher_addr.empty())
        return make_error("cannot tell which address of this machine " + r.host + " reaches; pass --network-interface",
                          exit_code::kLaunchFailed);
      if (r.hello.launcher_addr != reach) a.bind_addr = "0.0.0.0";  // hosts reach us on several addresses
    }
  }
  a.local.rendezvous_addr = reach;
  a.local.iface = iface.empty() && !remotes.empty() ? iface_of_addr(reach) : iface;
  for (const auto& r : remotes)
    a.remote[r.host] = {iface_addr.empty() ? r.hello.launcher_addr : iface_addr,
                        iface.empty() ? r.hello.host_iface : iface};
  a.master_addr = reach;
  for (const auto& r : remotes)
    if (r.host == rank0_host) {
      a.master_addr = r.hello.host_addr;
      a.master_port = r.hello.free_port;
    }
  return a;
}

}  // namespace hvdrun
