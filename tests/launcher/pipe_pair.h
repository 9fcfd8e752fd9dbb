// Test helper: a pipe whose ends a test closes early by hand (setting them to -1), or not, and take() for what is in it now.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace hvdrun {

struct Pipe {
  int rd = -1, wr = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    rd = fds[0];
    wr = fds[1];
  }
  ~Pipe() {
    if (rd >= 0) close(rd);
    if (wr >= 0) close(wr);
  }
  // What is in the pipe now (the sink was drained), without waiting for more.
  std::string take() {
    std::string out;
    char buf[4096];
    pollfd p{rd, POLLIN, 0};
    while (poll(&p, 1, 0) == 1) {
      ssize_t n = read(rd, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
};

}  // namespace hvdrun
