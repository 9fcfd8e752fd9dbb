// Test helper: a pipe whose ends a test closes early by hand (setting them to -1), or not.
#pragma once

#include <fcntl.h>
#include <unistd.h>

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
};

}  // namespace hvdrun
