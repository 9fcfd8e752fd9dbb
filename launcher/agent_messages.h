// The JSON messages between hvdrun and `hvdrun --agent` (carried in agent_wire frames).
// Pure: no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/result.h"
#include "launcher/exit_status.h"
#include "launcher/host_facts.h"

namespace hvdrun {

// What the launcher sends an agent (kJob).
struct AgentJob {
  std::string host;  // as written in -H (or the Slurm node), for messages
  std::string cwd;
  double kill_grace = 5;
  double heartbeat_timeout = 30;  // HVDRUN_HEARTBEAT_TIMEOUT
  bool stdin_to_rank0 = false;    // rank 0 is here and hvdrun relays its stdin (kStdin)
  bool python_facts = false;      // the pre-flight check wants the Python's facts (kReady)
  // ... once the workers run (kPythonFacts, when the probe answers; never before kStart,
  // never holding kDone). An older agent ignores it: no facts from that host.
  bool python_facts_after_start = false;
  std::string bind_to = "none";   // --bind-to, decided on the host from its topology (placement.h)
  // An elastic job (docs/ELASTIC.md): after kStart the agent runs no rank of `ranks` (they
  // are the host's slots, for the checks and the budget) but the workers that kSpawn asks
  // for, until hvdrun closes the link.
  bool elastic = false;
  struct Rank {
    int rank = 0;
    std::vector<std::string> argv, env;
  };
  std::vector<Rank> ranks;
};
std::string encode_job(const AgentJob& job);
Result<AgentJob> decode_job(const std::string& json);

// What an agent tells the launcher first (kHello): what it is and the addresses it has,
// whichever way it was started (never what SSH says).
struct AgentHello {
  std::string version;
  std::string node;           // its host name (Slurm: SLURMD_NODENAME)
  std::string network_stack;  // network_stack_id(): equal ones reach each other on loopback
  std::vector<InterfaceAddress> ifaces;  // every address of every interface it has
  int free_port = 0;          // a port free on this host (MASTER_PORT when rank 0 is here)
  // Set when the connection itself says (the agent dialed back to hvdrun, or libssh's
  // socket): the launcher's address as this host reached it, and this host's.
  std::string launcher_addr, host_addr;
  HostFacts facts;  // for the pre-flight check (an older agent's: version only)
};
std::string encode_hello(const AgentHello& h);
Result<AgentHello> decode_hello(const std::string& json);

// kReady: the host is prepared; for a Python command, that Python's facts (the job names
// the command and its PATH). An empty payload: no Python command.
struct AgentReady {
  bool has_python = false;
  PythonFacts python;
};
std::string encode_ready(const AgentReady& r);
Result<AgentReady> decode_ready(const std::string& json);

// The first frame of an agent that dialed back to hvdrun (kAttach): the one-job token it
// was given and which of the started agents it is.
struct AgentAttach {
  std::string token;  // hex
  int task = -1;      // srun's SLURM_PROCID: the index of its node in the launch
  std::string node;
};
std::string encode_attach(const AgentAttach& a);
Result<AgentAttach> decode_attach(const std::string& json);

// The agent's reports once it has the job. Their decoders fail only on a payload that is no
// JSON object; a field that is missing, of another type or out of range takes its default
// (an agent's malformed report is passed over, never thrown on: the relay thread that reads
// them catches nothing).

// kSetupError: the host could not be prepared (the kind travels with it: hvdrun's exit-code
// table decides there).
struct AgentSetupError {
  std::string message = "setup failed";
  int code = exit_code::kLaunchFailed;
  ErrorKind kind = ErrorKind::kLaunchFailed;
};
std::string encode_setup_error(const AgentSetupError& e);
Result<AgentSetupError> decode_setup_error(const std::string& json);

// kFailed: a rank ended other than with code 0 (its wait status), for the blame.
struct AgentFailed {
  int rank = -1;
  int status = 1 << 8;
};
std::string encode_failed(const AgentFailed& f);
Result<AgentFailed> decode_failed(const std::string& json);

// kExited: a rank exited with code 0, for the blame.
struct AgentExited {
  int rank = -1;
};
std::string encode_exited(const AgentExited& e);
Result<AgentExited> decode_exited(const std::string& json);

// kSlurmSignal: Slurm signalled the agent's step.
struct AgentSlurmSignal {
  int signal = 0;
};
std::string encode_slurm_signal(const AgentSlurmSignal& s);
Result<AgentSlurmSignal> decode_slurm_signal(const std::string& json);

// kStdinTaken: bytes of kStdin that left the agent for rank 0, or (closed) rank 0's stdin is
// closed. On the wire one or the other ({"bytes":N} or {"closed":true}).
struct AgentStdinTaken {
  uint64_t bytes = 0;
  bool closed = false;
};
std::string encode_stdin_taken(const AgentStdinTaken& t);
Result<AgentStdinTaken> decode_stdin_taken(const std::string& json);

// kDone: the job's code on this host, and how long hvdrun had been silent when the agent
// gave it up (0: it did not; on the wire only when it did).
struct AgentDone {
  int code = 0;
  int lost_contact_s = 0;
};
std::string encode_done(const AgentDone& d);
Result<AgentDone> decode_done(const std::string& json);

// An elastic job's worker on an agent's host (hvdrun -> agent): kSpawn starts one (its id is
// hvdrun's, unique in the job; kOutput carries the id as its rank), kKill signals its
// process group; the agent reports its end with kEnded (its wait status) once its output
// has gone.
struct AgentSpawn {
  int id = -1;
  std::vector<std::string> argv, env;
};
std::string encode_spawn(const AgentSpawn& s);
Result<AgentSpawn> decode_spawn(const std::string& json);
struct AgentKill {
  int id = -1;
  int signal = 0;
};
std::string encode_kill(const AgentKill& k);
Result<AgentKill> decode_kill(const std::string& json);
struct AgentEnded {
  int id = -1;
  int status = 1 << 8;
};
std::string encode_ended(const AgentEnded& e);
Result<AgentEnded> decode_ended(const std::string& json);

}  // namespace hvdrun
