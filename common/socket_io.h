// Exact reads and writes on a non-blocking socket, each bounded by a deadline: the one
// place that loops over partial I/O, EINTR, EAGAIN and poll for the rendezvous client and
// the data-plane handshake; and write_all for blocking pipes and files.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string_view>

#include <sys/socket.h>

#include "common/result.h"
#include "common/unique_fd.h"

namespace hvdrun {

// Error kinds: kPeerLost (end of stream), kTimeout (the deadline passed, sys_errno
// ETIMEDOUT), else kSystem with the errno.

// Milliseconds from now until `deadline` (0 when past), for poll().
int ms_until(std::chrono::steady_clock::time_point deadline);

// A non-blocking, close-on-exec TCP connection to `sa`, established before `deadline`.
// Errors: kTimeout (ETIMEDOUT), else kSystem with the connect errno (ECONNREFUSED, EHOSTUNREACH, ...).
Result<UniqueFd> connect_tcp(const sockaddr* sa, socklen_t len, std::chrono::steady_clock::time_point deadline);

// Whether a refused connection is worth another try: kRetry while the listener may not be
// up yet (the rendezvous server before hvdrun has bound it), kFinal where it listens
// already (a peer's data-plane port: refused means it is gone).
enum class Refused { kRetry, kFinal };

// connect_tcp, tried again with jittered back-off (10 ms doubling to 1 s) until `deadline`
// while the error is transient: no route or network (a link flapping; for at most
// kUnreachableRetry), a reset, a time-out of one try, and a refusal when `refused` says
// so. The error is the last try's. `on_retry`, when set, is called with each failed try's
// errno before the pause that precedes the next (a test waits on it).
constexpr std::chrono::seconds kUnreachableRetry{10};
Result<UniqueFd> connect_tcp_retrying(const sockaddr* sa, socklen_t len, std::chrono::steady_clock::time_point deadline,
                                      Refused refused, const std::function<void(int err)>& on_retry = {});

Status write_exact(int fd, const void* buf, size_t len, std::chrono::steady_clock::time_point deadline);

// All of `data` to a blocking fd (a pipe or a file), retrying partial writes and EINTR.
// The error carries sys_errno (EPIPE when the reader is gone; SIGPIPE must be ignored).
Status write_all(int fd, std::string_view data);
Status read_exact(int fd, void* buf, size_t len, std::chrono::steady_clock::time_point deadline);

}  // namespace hvdrun
