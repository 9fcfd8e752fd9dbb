#include "launcher/exit_status.h"

#include <cassert>

namespace hvdrun {

const std::vector<ExitStatusRow>& exit_status_table() {
  static const std::vector<ExitStatusRow> rows = {
      {ErrorKind::kInternal, "internal error", exit_code::kInternal, "hvdrun itself failed (a bug)."},
      {ErrorKind::kUsage, "usage error", exit_code::kUsage,
       "A bad option, number, host list, -x spec or config file. Nothing was started."},
      {ErrorKind::kBadHostFile, "bad host file", exit_code::kUsage,
       "The host file cannot be read or parsed. Nothing was started."},
      {ErrorKind::kResourceLimit, "resource limit", exit_code::kLaunchFailed,
       "The job does not fit the open-file or process limits (RLIMIT_NOFILE, RLIMIT_NPROC, pid_max)."},
      {ErrorKind::kUnreachableHost, "unreachable host", exit_code::kLaunchFailed,
       "A remote host could not be reached. Nothing was started."},
      {ErrorKind::kAuth, "authentication failed", exit_code::kLaunchFailed,
       "A remote host refused the SSH keys, or its host key did not match. Nothing was started."},
      {ErrorKind::kLaunchFailed, "launch failed", exit_code::kLaunchFailed,
       "The workers could not be started (the working directory, a fork, a pipe, a remote agent)."},
      {ErrorKind::kStartTimeout, "start timeout", exit_code::kStartTimeout,
       "Not every rank reached the rendezvous within the start timeout."},
      {ErrorKind::kLostContact, "lost contact", exit_code::kLostContact,
       "The connection to a remote host's agent was lost or silent for HVDRUN_HEARTBEAT_TIMEOUT during the job "
       "(a network cut, or hvdrun itself was stopped); the agent there ended its ranks."},
      {ErrorKind::kRankExitedEarly, "rank exited early", exit_code::kExitedEarly,
       "A rank exited with 0 while the others still waited on it (it left the job before its end)."},
      {ErrorKind::kOutputFailed, "output failed", exit_code::kOutputFailed,
       "The job's output could not be written (an --output-filename file, the timeline: the disk is full, ...)."},
      {ErrorKind::kNotExecutable, "not executable", exit_code::kNotExecutable,
       "The command was found but cannot be executed."},
      {ErrorKind::kNotFound, "not found", exit_code::kNotFound, "The command was not found."},
      {ErrorKind::kRankFailed, "rank failed", -1, "The first rank that failed exited with this code."},
      {ErrorKind::kRankKilled, "rank killed", -1, "The first rank that failed was killed by signal N: 128+N."},
      {ErrorKind::kInterrupted, "interrupted", -1,
       "hvdrun received signal N (SIGHUP, SIGINT, SIGTERM: 129, 130, 143) and tore the job down: 128+N."},
      {ErrorKind::kTimeout, "timeout", exit_code::kInternal, "(worker side) no progress within HVDRUN_TIMEOUT."},
      {ErrorKind::kPeerLost, "peer lost", exit_code::kInternal, "(worker side) a peer closed its connection."},
      // The worker side's kinds and those of the layers under both: a bug if one ends hvdrun.
      {ErrorKind::kNotInitialized, "not initialized", exit_code::kInternal, "(worker side) hvd_init has not run."},
      {ErrorKind::kInvalidArgument, "invalid argument", exit_code::kInternal, "(worker side) a bad argument."},
      {ErrorKind::kMismatch, "mismatch", exit_code::kInternal, "(worker side) ranks called a collective differently."},
      {ErrorKind::kUnsupported, "unsupported", exit_code::kInternal, "(worker side) not available in this build."},
      {ErrorKind::kRendezvous, "rendezvous failed", exit_code::kInternal, "(worker side) the rendezvous failed."},
      {ErrorKind::kCuda, "CUDA error", exit_code::kInternal, "(worker side) a CUDA runtime error."},
      {ErrorKind::kNccl, "NCCL error", exit_code::kInternal, "(worker side) an NCCL error."},
      {ErrorKind::kSystem, "system error", exit_code::kInternal, "An operating-system call failed."},
      {ErrorKind::kMalformed, "malformed", exit_code::kInternal, "Bytes from a peer or a file that are not valid."},
      {ErrorKind::kMissingKey, "missing key", exit_code::kInternal, "A key-value store has no such key."},
      {ErrorKind::kReset, "reset", exit_code::kInternal, "(worker side, elastic) the round of a collective is over."},
      {ErrorKind::kRemoved, "removed", exit_code::kInternal, "(worker side, elastic) the worker's slot was removed."},
  };
  return rows;
}

const ExitStatusRow& exit_status_row(ErrorKind kind) {
  for (const auto& r : exit_status_table())
    if (r.kind == kind) return r;
  assert(false && "every ErrorKind has a row (exit_status_test holds it)");
  return exit_status_table().front();  // kInternal
}

const char* error_kind_name(ErrorKind kind) { return exit_status_row(kind).name; }

ErrorKind error_kind_from_int(int v, ErrorKind otherwise) {
  for (const auto& r : exit_status_table())
    if (static_cast<int>(r.kind) == v) return r.kind;
  return otherwise;
}

int exit_code_for(const Error& e) {
  int code = exit_status_row(e.kind).exit_code;
  if (code < 0) code = e.exit_code;
  return code == 0 ? exit_code::kInternal : code;
}

Error error_of(ErrorKind kind, std::string message) { return make_error(kind, std::move(message)); }

Error rank_error(ErrorKind kind, std::string message, int exit_code) {
  Error e = make_error(kind, std::move(message));
  e.exit_code = exit_code;
  return e;
}

}  // namespace hvdrun
