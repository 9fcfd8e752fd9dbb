// Writing hvdrun's output from a thread of its own (launcher/async_writer): real pipes.
#include "launcher/async_writer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <future>
#include <thread>
#include <chrono>
#include <algorithm>
#include <gtest/gtest.h>
#include <string>

#include "pipe_pair.h"

namespace hvdrun {
namespace {

// Everything until EOF (what came within 10 s, and a note saying so).
std::string read_to_eof(int fd) {
  std::string out;
  char buf[65536];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) return out + "<no EOF within 10 s>";
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

// A write the pipe cannot take stays in the backlog (the event loop's back pressure) until
// the reader reads; nothing is lost or reordered, and close_after_queued() ends the stream.
TEST(AsyncWriter, BacklogHoldsWhatTheReaderHasNotTakenAndNothingIsLost) {
  Pipe p;
  int wr = p.wr;
  p.wr = -1;
  AsyncWriter w{UniqueFd(wr)};
  EXPECT_EQ(w.backlog(), 0u);
  std::string big(1 << 20, 'a'), small = "and then this\n";
  w.write(big);
  w.write(small);
  w.write("");  // nothing
  EXPECT_GT(w.backlog(), 0u);  // a pipe holds 64 KiB: most of the 1 MiB waits
  w.close_after_queued();
  w.write("dropped after the end\n");
  EXPECT_EQ(read_to_eof(p.rd), big + small);
  EXPECT_EQ(w.backlog(), 0u);
}

// With a capacity (the agent's writer of rank 0's stdin), a writer faster than the reader
// waits in write(): the queue holds at most the capacity (it grew with every write).
TEST(AsyncWriter, AWriterPastTheCapacityWaitsForTheReader) {
  Pipe p;
  int wr = p.wr;
  p.wr = -1;
  constexpr size_t kChunk = 64 << 10, kCapacity = 4 * kChunk;
  AsyncWriter w{UniqueFd(wr)};
  w.set_capacity(kCapacity);
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; i < 32; ++i, ++written) w.write(std::string(kChunk, static_cast<char>('a' + i % 26)));
    w.close_after_queued();
  });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (written.load() < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  size_t most = w.backlog(), total = 0;
  char buf[4096];
  while (true) {  // the reader, slower than the writer: a page at a time
    most = std::max(most, w.backlog());
    ssize_t n = read(p.rd, buf, sizeof buf);
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
  writer.join();
  EXPECT_EQ(total, 32 * kChunk);  // nothing lost
  EXPECT_LE(most, kCapacity) << "the queue grew past its capacity";
}

TEST(AsyncWriter, DrainReturnsOnceEverythingIsWritten) {
  Pipe p;
  AsyncWriter w(p.wr);
  for (int i = 0; i < 100; ++i) w.write("line " + std::to_string(i) + "\n");
  w.drain();
  EXPECT_EQ(w.backlog(), 0u);
  close(p.wr);  // not owned: the writer leaves it open
  p.wr = -1;
  std::string got = read_to_eof(p.rd), want;
  for (int i = 0; i < 100; ++i) want += "line " + std::to_string(i) + "\n";
  EXPECT_EQ(got, want);
}

// The reader went away: on_failure gets EPIPE once, on_done counts the dropped bytes as
// failed, drain() does not hang and later output is dropped.
TEST(AsyncWriter, AReaderThatWentAwayIsOneFailureAndDropsTheRest) {
  signal(SIGPIPE, SIG_IGN);  // as in hvdrun
  Pipe p;
  close(p.rd);
  p.rd = -1;
  std::promise<int> failure;
  std::atomic<int> failures{0};
  std::promise<size_t> dropped;  // on_done runs after drain() may have returned
  AsyncWriter w(p.wr);
  w.on_failure([&](int err) {
    if (failures++ == 0) failure.set_value(err);
  });
  w.on_done([&](size_t bytes, bool failed) {
    if (failed) dropped.set_value(bytes);
  });
  w.write("nobody reads this\n");
  auto f = failure.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), EPIPE);
  w.drain();
  w.write("dropped\n");
  w.drain();
  EXPECT_EQ(w.backlog(), 0u);
  EXPECT_EQ(failures.load(), 1);
  auto d = dropped.get_future();
  ASSERT_EQ(d.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(d.get(), 18u);
  w.on_failure(nullptr);
  w.on_done(nullptr);
}

}  // namespace
}  // namespace hvdrun
