// Exact reads and writes on a non-blocking socket, each bounded by a deadline: the one
// place that loops over partial I/O, EINTR, EAGAIN and poll for the rendezvous client and
// the data-plane handshake.
#pragma once

#include <chrono>
#include <cstddef>

#include <sys/socket.h>

#include "common/result.h"
#include "common/unique_fd.h"

namespace hvdrun {

// Error codes: kPeerClosed (end of stream), ETIMEDOUT (the deadline passed), else errno.
constexpr int kPeerClosed = -1;

// Milliseconds from now until `deadline` (0 when past), for poll().
int ms_until(std::chrono::steady_clock::time_point deadline);

// A non-blocking, close-on-exec TCP connection to `sa`, established before `deadline`.
// Errors: ETIMEDOUT, else the connect errno (ECONNREFUSED, EHOSTUNREACH, ...).
Result<UniqueFd> connect_tcp(const sockaddr* sa, socklen_t len, std::chrono::steady_clock::time_point deadline);

Status write_exact(int fd, const void* buf, size_t len, std::chrono::steady_clock::time_point deadline);
Status read_exact(int fd, void* buf, size_t len, std::chrono::steady_clock::time_point deadline);

}  // namespace hvdrun
