// The pre-flight check: the facts of every host of a job (host_facts.h, from the agents'
// hellos and kReady) compared with each other and with what the job needs, before
// anything starts. Pure: the policy (check_preflight) and the table (preflight_table.h).
//
// Errors (the job would fail; the launch stops): an agent protocol other than hvdrun's; a
// named interface (--network-interface, NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME in the
// workers' environment) missing, down or without an address; descriptors or processes
// under what the host's ranks need. Warnings: another hvdrun version or build (same
// protocol), fewer GPUs than ranks on a host that has GPUs, other GPU models or drivers,
// other Python, torch or torch CUDA versions for a Python command, little room in
// /dev/shm, a clock more than a second off hvdrun's.
#pragma once

#include <string>
#include <vector>

#include "common/net.h"
#include "launcher/host_facts.h"

namespace hvdrun {

struct PreflightHost {
  std::string host;  // as the job names it (-H, the host file, Slurm)
  int slots = 0;     // the job's ranks there
  HostFacts facts;
  std::vector<InterfaceAddress> addrs;  // the host's addresses (the hello's)
  double clock_offset = 0;              // its clock minus hvdrun's, at least (s; 0: within the error)
  bool has_python = false;              // python: probed (a Python command)
  PythonFacts python;
};

// An interface setting the workers get, by where it comes from.
struct NamedIface {
  std::string origin;  // "--network-interface", "NCCL_SOCKET_IFNAME" or "GLOO_SOCKET_IFNAME"
  std::string value;   // as given: NCCL's "^docker", "=eth0", "ib" (a prefix), lists with ','
};

struct PreflightJob {
  std::string version;  // hvdrun's own (HVDRUN_VERSION_STRING)
  int protocol = 0;     // agentwire::kProtocol
  std::vector<NamedIface> ifaces;
};

enum class Finding { kWarning, kError };

// One thing that differs on one host, and the table column it belongs to.
struct PreflightFinding {
  std::string host;
  Finding severity = Finding::kWarning;
  std::string column;  // "hvdrun", "build", "gpus", "ifaces", "python", "shm", "limits", "clock"
  std::string text;    // what differs, for a line that names the host first
};

// Every finding, host by host in the order given (a host's in column order). Python is
// compared only between the hosts with has_python.
std::vector<PreflightFinding> check_preflight(const std::vector<PreflightHost>& hosts, const PreflightJob& job);

// The interfaces of `ifaces` that a setting names: NCCL_SOCKET_IFNAME's prefixes, '=' for
// exact names, '^' for all but those; exact names for the others.
std::vector<std::string> matching_ifaces(const NamedIface& named, const std::vector<IfaceFacts>& ifaces);

// Whether the findings allow the job: no error among them.
bool preflight_passes(const std::vector<PreflightFinding>& findings);

// One line per host with findings of `severity`: "HOST: TEXT; TEXT".
std::vector<std::string> preflight_lines(const std::vector<PreflightFinding>& findings, Finding severity);

// The table: a row per host (host, ranks, then a column per fact), a cell with an error
// marked '!', with a warning '*', then a key when anything is marked.
std::string preflight_table(const std::vector<PreflightHost>& hosts, const PreflightJob& job,
                            const std::vector<PreflightFinding>& findings);

}  // namespace hvdrun
