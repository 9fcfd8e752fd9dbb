// hvdrun's exit codes: one table from an error's kind (common/result.h) to the exit code
// and the words the report and the man page's EXIT STATUS section use. Nothing else in
// the launcher chooses an exit code.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace hvdrun {

struct ExitStatusRow {
  ErrorKind kind;
  const char* name;     // "lost contact": what the report calls it
  int exit_code;        // -1: the error's own code (a rank's code, 128 + a signal)
  const char* meaning;  // one sentence, as in the man page
};

// Every kind, in the order of the man page.
const std::vector<ExitStatusRow>& exit_status_table();
const ExitStatusRow& exit_status_row(ErrorKind kind);
const char* error_kind_name(ErrorKind kind);
// A kind sent as a number (the agent's setup error); `otherwise` for a number that is none.
ErrorKind error_kind_from_int(int v, ErrorKind otherwise);

// The exit code for an error: its kind's, else (a kind whose code is the error's own: a
// rank's, 128 + a signal) its exit_code; never 0 for an error.
int exit_code_for(const Error& e);

// An error of `kind` (the launcher's spelling of make_error).
Error error_of(ErrorKind kind, std::string message);
// An error whose exit code is its own (kRankFailed, kRankKilled, kInterrupted).
Error rank_error(ErrorKind kind, std::string message, int exit_code);

// Exit codes of hvdrun itself, from the table (a worker's failure gives that worker's code).
namespace exit_code {
constexpr int kInternal = 1;
constexpr int kUsage = 2;
constexpr int kLaunchFailed = 3;   // could not start the workers (fork, pipe, remote host)
constexpr int kStartTimeout = 4;   // not every rank reached the rendezvous in time
constexpr int kLostContact = 5;    // a remote agent went silent or its connection dropped mid-job
constexpr int kExitedEarly = 6;    // a rank exited 0 while the others still waited on it
constexpr int kOutputFailed = 7;   // the job's output could not be written
constexpr int kNotExecutable = 126;
constexpr int kNotFound = 127;
}  // namespace exit_code

}  // namespace hvdrun
