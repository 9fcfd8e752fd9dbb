// The self-pipe that wakes a poll() loop: woken from another thread, drained, and a typed
// error (not an exception) when no pipe can be made.
#include "common/wake_pipe.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <thread>

namespace hvdrun {
namespace {

int readable(const WakePipe& w, int timeout_ms) {
  pollfd p{w.fd(), POLLIN, 0};
  return poll(&p, 1, timeout_ms);
}

TEST(WakePipe, AWakeFromAnotherThreadIsSeenOnceDrained) {
  auto w = WakePipe::open();
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(readable(*w, 0), 0);
  std::thread t([&] {
    for (int i = 0; i < 100000; ++i) w->wake();  // more than the pipe holds: never blocks
  });
  t.join();
  EXPECT_EQ(readable(*w, 20000), 1);
  w->drain();
  EXPECT_EQ(readable(*w, 0), 0);
}

// In a child: every descriptor taken (the limit at the lowest free one), then open().
void open_with_no_descriptors_left() {
  int lowest = dup(0);  // every descriptor below it is open
  close(lowest);
  rlimit r{static_cast<rlim_t>(lowest), static_cast<rlim_t>(lowest)};
  setrlimit(RLIMIT_NOFILE, &r);
  auto w = WakePipe::open();
  // (_exit: LeakSanitizer's check at exit needs descriptors)
  _exit(!w && w.error().kind == ErrorKind::kSystem && w.error().sys_errno == EMFILE ? 0 : 1);
}

TEST(WakePipe, NoDescriptorsLeftIsATypedError) {
  EXPECT_EXIT(open_with_no_descriptors_left(), testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace hvdrun
