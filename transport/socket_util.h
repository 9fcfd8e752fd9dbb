// TCP helpers for the data plane: listening sockets, interface addresses, socket options.
#pragma once

#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace hvdrun::transport {

struct Listener {
  UniqueFd fd;
  std::string addr;  // what peers should connect to
  int port = 0;
};

// Listens on `bind_addr` (IPv4/IPv6 literal; "" = any) on an OS-chosen port.
Result<Listener> listen_tcp(const std::string& bind_addr, const std::string& advertise_addr);
// TCP_NODELAY, large buffers, close-on-exec.
void tune_data_socket(int fd, int buffer_bytes);

}  // namespace hvdrun::transport
