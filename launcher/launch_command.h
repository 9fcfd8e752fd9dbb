// Command lines that start `hvdrun --agent` on a host (pure): an OpenSSH-style client
// (--ssh-command) or a template (--launch-command 'kubectl exec -i {host} --'), and the
// srun line of the Slurm starter.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace hvdrun {

enum class HostKeyPolicy { kYes, kAcceptNew, kNo };
Result<HostKeyPolicy> parse_host_key_policy(const std::string& s);

// `word` quoted for a POSIX shell.
std::string shell_quote(const std::string& word);

// A command line split as a shell would (quotes, no substitutions); `what` names the
// option in errors.
Result<std::vector<std::string>> split_command_line(const std::string& line, const std::string& what);

// --ssh-command: `CMD [-p PORT] [-i FILE] -- HOST 'exec AGENT --agent'` (ssh runs the last
// word through the remote shell). `--` keeps a host from ever being read as an option.
Result<std::vector<std::string>> ssh_command_argv(const std::string& ssh_command, int port,
                                                  const std::string& identity_file, const std::string& host,
                                                  const std::string& remote_hvdrun);

// --launch-command: every `{host}` replaced by the host; without one, `-- HOST` appended.
// Then the agent's command as words of its own (AGENT --agent): exec-style launchers
// (kubectl exec) run them without a shell.
Result<std::vector<std::string>> template_argv(const std::string& launch_command, const std::string& host,
                                               const std::string& remote_hvdrun);

// One agent per node in one step: srun --nodes=N --ntasks=N --ntasks-per-node=1
// --kill-on-bad-exit=1 --nodelist=... -- AGENT --agent.
std::vector<std::string> srun_argv(const std::vector<std::string>& nodes, const std::string& remote_hvdrun);

}  // namespace hvdrun
