// Agent starters: how `hvdrun --agent` is started on a host and a byte stream to it made.
// Every starter gives RemoteHost the same stream (agent_wire frames) to the same agent:
//   ssh      libssh in-process, or the --ssh-command client (OpenSSH-style, `-- HOST`)
//   command  --launch-command's template ('kubectl exec -i {host} --'): the client relays
//            the agent's stdin and stdout
//   slurm    one srun step, one agent per node; each agent dials back to hvdrun (a
//            listening socket and a one-job token in srun's environment) and the
//            connection is its stream
// The one place that picks the starter is make_starter().
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/host_link.h"
#include "launcher/plan.h"

namespace hvdrun {

class AgentStarter {
 public:
  virtual ~AgentStarter() = default;
  // Before any open(): every host an agent will be opened on. An elastic job calls it again
  // for each host it adds (a starter that cannot start more agents then says why).
  virtual Status begin(const std::vector<std::string>& hosts, std::chrono::steady_clock::time_point deadline) {
    (void)hosts;
    (void)deadline;
    return {};
  }
  // The stream to `host`'s agent (its hello not read yet). Errors are one line naming the host.
  virtual Result<std::unique_ptr<HostLink>> open(const std::string& host,
                                                 std::chrono::steady_clock::time_point deadline) = 0;
  // The error for `text` (quoted, printable) found on a link before the agent's first
  // frame: who printed it, and what to do about it.
  virtual std::string text_before_agent(const std::string& text) const {
    return "the agent's stream started with text, not its first frame: '" + text + "'";
  }
};

struct StarterSettings {
  SshSettings ssh;
  std::string ssh_command;     // --ssh-command
  std::string launch_command;  // --launch-command
  std::string remote_hvdrun;   // the agent's executable on the hosts
  double start_timeout = 30;
};

std::unique_ptr<AgentStarter> make_starter(LauncherKind kind, const StarterSettings& s);

}  // namespace hvdrun
