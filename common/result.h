// Expected errors as values: Result<T> holds either a value or an Error whose
// message carries its context ("rank 3: connect 10.0.0.2:4000: connection refused").
//
// An Error has a kind: what went wrong, as a type, one vocabulary for the whole project.
// Two tables turn a kind into a number, and nothing else does: launcher/exit_status.cc
// (hvdrun's exit code and the word its report uses) and collectives/c_api.cc (the
// HVD_ERR_* code of the C API). Context the kind does not say travels beside it: the
// errno behind it (sys_errno), a rank's own exit code (exit_code), the peer it concerns
// (peer_rank). No decision reads an error's message (tests/source_rules_test.py holds it).
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace hvdrun {

// The numbers are sent between hvdrun and its remote agents (AgentSetupError): append new
// kinds, never renumber.
enum class ErrorKind {
  kUsage = 1,        // a bad option, number, host list, -x spec or config file
  kBadHostFile,      // a host file that cannot be read or parsed
  kResourceLimit,    // the job does not fit RLIMIT_NOFILE, RLIMIT_NPROC, pid_max, or a spawn ran out
  kUnreachableHost,  // a remote host could not be connected (DNS, refused, no route, time-out)
  kAuth,             // authentication failed (SSH keys, host keys, the job secret)
  kLaunchFailed,     // the workers could not be started (remote setup, fork, pipes)
  kNotFound,         // the command was not found
  kNotExecutable,    // the command was found but cannot be executed
  kStartTimeout,     // not every rank reached the rendezvous in time
  kRankFailed,       // a rank exited with a non-zero code (exit_code: the rank's)
  kRankKilled,       // a rank was killed by a signal (exit_code: 128 + signal)
  kRankExitedEarly,  // a rank exited 0 while the others still waited on it
  kLostContact,      // the connection to a remote agent was lost or went silent mid-job
  kInterrupted,      // hvdrun received a signal and tore the job down (exit_code: 128 + signal)
  kTimeout,          // an operation made no progress within its time-out
  kPeerLost,         // a peer (rank, server, agent) closed its connection, or it broke
  kOutputFailed,     // the job's output could not be written (full disk, closed stdout)
  kInternal,         // a bug: an invariant broke
  // The worker side (libhvdrun) and the layers under it.
  kNotInitialized,   // hvd_init has not run (or this process is a fork of the one that did)
  kInvalidArgument,  // a bad dtype, op, root, pointer, count, name or setting from the caller
  kMismatch,         // ranks called a collective with different arguments
  kUnsupported,      // not available in this build or in this state (device tensors while joined)
  kRendezvous,       // hvdrun's rendezvous cannot be reached or used
  kCuda,             // a CUDA runtime error
  kNccl,             // an NCCL error
  kSystem,           // an operating-system call failed (sys_errno says which)
  kMalformed,        // bytes from a peer or a file that are not what they must be
  kMissingKey,       // a key-value store has no such key
  // Elastic jobs (docs/ELASTIC.md).
  kReset,            // the round this worker's collectives belong to is over (a peer lost, hosts changed)
  kRemoved,          // this worker's slot is not in the job's newest round
};
// The first and last kinds (the tables' tests walk every kind).
constexpr ErrorKind kFirstErrorKind = ErrorKind::kUsage;
constexpr ErrorKind kLastErrorKind = ErrorKind::kRemoved;

struct Error {
  std::string message;
  ErrorKind kind = ErrorKind::kInternal;
  // Context, never the kind:
  int sys_errno = 0;  // the errno behind it (ETIMEDOUT, ECONNREFUSED, EPIPE, ...); 0: none
  int exit_code = 0;  // kRankFailed, kRankKilled, kInterrupted: the rank's code or 128 + the signal
  // kTimeout: the rank this one made no progress with; kPeerLost: the rank whose
  // connection closed (-1: none)
  int peer_rank = -1;
};

inline Error make_error(ErrorKind kind, std::string message) { return Error{std::move(message), kind}; }
// An error an OS call's errno caused (sys_errno: `err`).
inline Error make_sys_error(ErrorKind kind, std::string message, int err) {
  Error e{std::move(message), kind};
  e.sys_errno = err;
  return e;
}

// Prefixes context to an error travelling up: wrap(err, "rank 3") -> "rank 3: <msg>".
// The kind and its context travel with it.
inline Error wrap(Error e, const std::string& context) {
  e.message = context + ": " + e.message;
  return e;
}

// The same error (message and context) with another kind: a layer that knows better what
// it means.
inline Error with_kind(Error e, ErrorKind kind) {
  e.kind = kind;
  return e;
}

// The same context with another message: a layer that rewords what it passes on.
inline Error with_message(Error e, std::string message) {
  e.message = std::move(message);
  return e;
}

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { assert(!ok()); return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { assert(!ok_); return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace hvdrun
