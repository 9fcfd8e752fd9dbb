// `hvdrun --agent`: what runs on a remote host, started by the launcher's starter (SSH, a
// command template, srun). It reads the job from its stream (never from its command line),
// starts that host's ranks with the same LocalAgent as a local launch, and streams their
// output and exits back. The stream is its stdin/stdout, or (when started by srun, with
// HVDRUN_AGENT_CONNECT set) a TCP connection it makes back to hvdrun. EOF on the stream
// (hvdrun died, or the connection dropped) ends every worker on the host.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/agent_messages.h"
#include "launcher/agent_wire.h"

namespace hvdrun {

// The agent's main, given its words after `--agent` (`--start-timeout=S`: how long its
// launcher may take to send the job and the start; 30 s without it); returns its exit code.
int run_agent_mode(const std::vector<std::string>& args);

}  // namespace hvdrun
