// An agent's side of an elastic job (AgentJob::elastic; docs/ELASTIC.md): once hvdrun has
// said start, the workers it asks for (kSpawn) run here, their output goes to hvdrun as
// kOutput tagged with their id, kKill signals a worker's process group, and kEnded reports
// a worker's end (after the last of its output). Heartbeats go both ways. hvdrun gone (the
// end of its stream, or silent past the job's heartbeat time-out) ends every worker here
// (SIGTERM, SIGKILL after the kill grace). One thread: the link, the workers' pipes and the
// signals in one poll.
#pragma once

#include "launcher/agent_messages.h"
#include "launcher/agent_wire.h"
#include "launcher/host_preparation.h"

namespace hvdrun {

// The agent's exit code: 0 when hvdrun closed the link with nothing running here, 1 when
// the workers had to be ended for it (lost contact, or a signal to the agent).
int run_elastic_agent(const AgentJob& job, PreparedHost& host, int in_fd, int out_fd, agentwire::FrameReader& reader);

}  // namespace hvdrun
