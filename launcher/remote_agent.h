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

// The agent's main; returns its exit code.
int run_agent_mode();

}  // namespace hvdrun
