#include "common/wake_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hvdrun {

Result<WakePipe> WakePipe::open() {
  int p[2];
  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
    return make_sys_error(ErrorKind::kSystem, std::string("wake pipe: ") + std::strerror(errno), errno);
  WakePipe w;
  w.rd_.reset(p[0]);
  w.wr_.reset(p[1]);
  return w;
}

void WakePipe::wake() const {
  char c = 1;
  [[maybe_unused]] ssize_t n = ::write(wr_.get(), &c, 1);
}

void WakePipe::drain() const {
  char buf[64];
  while (::read(rd_.get(), buf, sizeof buf) > 0) {
  }
}

}  // namespace hvdrun
