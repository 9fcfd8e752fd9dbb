// Expected errors as values: Result<T> holds either a value or an Error whose
// message carries its context ("rank 3: connect 10.0.0.2:4000: connection refused").
//
// An Error has a kind: what went wrong, as a type. The launcher's one table
// (launcher/exit_status.cc) turns a kind into hvdrun's exit code and the word its report
// uses; nothing classifies an error by searching its message. `code` stays for what the
// kind does not say (a rank's own exit code, an errno such as ETIMEDOUT, an hvd_* code at
// the C boundary); an Error made without a kind (kUnspecified) is classified by its code,
// as before kinds existed.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace hvdrun {

enum class ErrorKind {
  kUnspecified = 0,  // made without a kind: its code decides
  kUsage,            // a bad option, number, host list, -x spec or config file
  kBadHostFile,      // a host file that cannot be read or parsed
  kResourceLimit,    // the job does not fit RLIMIT_NOFILE, RLIMIT_NPROC, pid_max, or a spawn ran out
  kUnreachableHost,  // a remote host could not be connected (DNS, refused, no route, time-out)
  kAuth,             // authentication failed (SSH keys, host keys, the job secret)
  kLaunchFailed,     // the workers could not be started (remote setup, fork, pipes)
  kNotFound,         // the command was not found
  kNotExecutable,    // the command was found but cannot be executed
  kStartTimeout,     // not every rank reached the rendezvous in time
  kRankFailed,       // a rank exited with a non-zero code (the code is the rank's)
  kRankKilled,       // a rank was killed by a signal (code: 128 + signal)
  kRankExitedEarly,  // a rank exited 0 while the others still waited on it
  kLostContact,      // the connection to a remote agent was lost or went silent mid-job
  kInterrupted,      // hvdrun received a signal and tore the job down (code: 128 + signal)
  kTimeout,          // an operation made no progress within its time-out
  kPeerLost,         // a peer (rank, server) closed its connection
  kOutputFailed,     // the job's output could not be written (full disk, closed stdout)
  kInternal,         // a bug: an invariant broke
};

struct Error {
  std::string message;
  int code = 1;  // an exit code, errno or hvd_* code, depending on the layer (see above)
  ErrorKind kind = ErrorKind::kUnspecified;
  // kTimeout: the rank this one made no progress with; kPeerLost: the rank whose
  // connection closed (-1: none)
  int peer_rank = -1;
};

inline Error make_error(std::string message, int code = 1) { return Error{std::move(message), code, ErrorKind::kUnspecified}; }
inline Error make_error(ErrorKind kind, std::string message, int code = 1) {
  return Error{std::move(message), code, kind};
}

// Prefixes context to an error travelling up: wrap(err, "rank 3") -> "rank 3: <msg>".
// The kind and code travel with it.
inline Error wrap(Error e, const std::string& context) {
  e.message = context + ": " + e.message;
  return e;
}

// The same error with another kind (a layer that knows better what it means).
inline Error with_kind(Error e, ErrorKind kind) {
  e.kind = kind;
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
