// hvdrun's stdin relay (launcher/stdin_relay) over real pipes: the input is one pipe, rank
// 0's stdin another (PipeStdinSink); the test drives the poll loop's turns itself.
#include "launcher/stdin_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <string>

#include "pipe_pair.h"

namespace hvdrun {
namespace {

// One turn of the agent's loop: a poll on what the relay wants (up to `ms`), then its step.
void turn(StdinRelay& relay, int ms = 5000) {
  short revents = 0;
  if (auto want = relay.wants()) {
    pollfd p = *want;
    if (poll(&p, 1, ms) > 0) revents = p.revents;
  }
  relay.step(revents);
}

size_t unread(int fd) {
  int n = -1;
  EXPECT_EQ(ioctl(fd, FIONREAD, &n), 0);
  return static_cast<size_t>(n);
}

// Everything rank 0's pipe holds now (its read end made non-blocking).
std::string drain(int fd) {
  fcntl(fd, F_SETFL, O_NONBLOCK);
  std::string got;
  char buf[65536];
  ssize_t r;
  while ((r = read(fd, buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(r));
  return got;
}

TEST(StdinRelay, PassesTheInputOnAndClosesRankZerosStdinAtItsEnd) {
  Pipe input;
  PipeStdinSink rank0;
  ASSERT_TRUE(rank0.open());
  StdinRelay relay(input.rd, rank0);
  ASSERT_EQ(write(input.wr, "hello\n", 6), 6);
  turn(relay);
  EXPECT_EQ(drain(rank0.read_end()), "hello\n");
  close(input.wr);
  input.wr = -1;
  turn(relay);
  EXPECT_TRUE(relay.over());
  char c;
  EXPECT_EQ(read(rank0.read_end(), &c, 1), 0) << "rank 0 saw no end of its stdin";
}

// The input is read only when the poll said it is readable (a backgrounded hvdrun's read
// of its terminal then stops it rather than steal the shell's line), and not while a chunk
// waits for rank 0: at most one chunk is held.
TEST(StdinRelay, ReadsOnlyWhenPollSaysSoAndNothingIsPending) {
  Pipe input;
  PipeStdinSink rank0;
  ASSERT_TRUE(rank0.open());
  ASSERT_EQ(fcntl(rank0.room_fd(), F_SETPIPE_SZ, 4096), 4096);
  StdinRelay relay(input.rd, rank0);
  ASSERT_EQ(write(input.wr, "a", 1), 1);
  relay.step(0);  // a turn whose poll said nothing about the input
  EXPECT_EQ(unread(input.rd), 1u);
  turn(relay);
  EXPECT_EQ(drain(rank0.read_end()), "a");

  std::string big(32768, 'x');
  ASSERT_EQ(write(input.wr, big.data(), big.size()), static_cast<ssize_t>(big.size()));
  turn(relay);  // read whole, 4 KiB of it taken by rank 0's full pipe
  EXPECT_EQ(relay.pending(), big.size() - 4096);
  ASSERT_EQ(write(input.wr, "more", 4), 4);
  turn(relay, 0);  // rank 0's pipe is still full
  EXPECT_EQ(unread(input.rd), 4u) << "the input was read while a chunk was pending";
  std::string got = drain(rank0.read_end());
  for (int i = 0; i < 100 && got.size() < big.size() + 4; ++i) {  // rank 0 reads: the rest comes
    turn(relay);
    got += drain(rank0.read_end());
  }
  EXPECT_EQ(got, big + "more");
}

// Rank 0 closed its stdin: the relay is over, and reads no more of the input.
TEST(StdinRelay, EndsWhenRankZeroClosedItsStdin) {
  signal(SIGPIPE, SIG_IGN);
  Pipe input;
  PipeStdinSink rank0;
  ASSERT_TRUE(rank0.open());
  rank0.close_read_end();
  StdinRelay relay(input.rd, rank0);
  ASSERT_EQ(write(input.wr, "x", 1), 1);
  turn(relay);
  EXPECT_TRUE(relay.over());
  EXPECT_FALSE(relay.wants());
  ASSERT_EQ(write(input.wr, "yz", 2), 2);
  turn(relay, 0);
  EXPECT_EQ(unread(input.rd), 2u);
}

}  // namespace
}  // namespace hvdrun
