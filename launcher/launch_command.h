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

// A command line split into words as a POSIX shell splits a simple command: blanks
// separate, '...' and "..." quote, a backslash escapes. Nothing is expanded: $VAR, ~,
// globs and {a,b} stay as written (as mpirun's plm_rsh_agent), so no word depends on
// hvdrun's environment or working directory; | & ; < > ( ), ` and a newline outside
// quotes are refused, as they would need a shell. `what` names the option in errors.
Result<std::vector<std::string>> split_command_line(const std::string& line, const std::string& what);

// The agent's own words after its path: `--agent --start-timeout=S`. The agent waits for
// the job and the start at most S (and a margin) from its own start, so that an agent whose
// launcher vanished during start-up (a network cut sends no FIN) does not linger.
std::vector<std::string> agent_words(double start_timeout);

// --ssh-command: `CMD [-p PORT] [-i FILE] -- HOST 'exec AGENT --agent --start-timeout=S'`
// (ssh runs the last word through the remote shell). `--` keeps a host from ever being
// read as an option.
Result<std::vector<std::string>> ssh_command_argv(const std::string& ssh_command, int port,
                                                  const std::string& identity_file, const std::string& host,
                                                  const std::string& remote_hvdrun, double start_timeout);

// The remote shell command of the libssh starter: `exec AGENT --agent --start-timeout=S`.
std::string ssh_remote_command(const std::string& remote_hvdrun, double start_timeout);

// --launch-command: every `{host}` replaced by the host; without one, `-- HOST` appended.
// Then the agent's command as words of its own (AGENT --agent): exec-style launchers
// (kubectl exec) run them without a shell.
Result<std::vector<std::string>> template_argv(const std::string& launch_command, const std::string& host,
                                               const std::string& remote_hvdrun, double start_timeout);

// One agent per node in one step: srun --nodes=N --ntasks=N --ntasks-per-node=1
// --kill-on-bad-exit=1 --nodelist=... -- AGENT --agent.
std::vector<std::string> srun_argv(const std::vector<std::string>& nodes, const std::string& remote_hvdrun,
                                   double start_timeout);

}  // namespace hvdrun
