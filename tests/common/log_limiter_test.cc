#include "common/log_limiter.h"

#include <gtest/gtest.h>

namespace hvdrun {

TEST(LogLimiter, FirstLineThenACountPerKind) {
  using namespace std::chrono_literals;
  LogLimiter lim(5s);
  std::vector<std::string> out;
  auto emit = [&](const std::string& l) { out.push_back(l); };
  LogLimiter::Clock::time_point t0{};
  t0 += 100s;
  EXPECT_TRUE(lim.log("refused: bad", "refused from a: bad", t0, emit));
  for (int i = 0; i < 999; ++i) EXPECT_FALSE(lim.log("refused: bad", "refused from b: bad", t0 + 1s, emit));
  EXPECT_TRUE(lim.log("other", "other line", t0 + 1s, emit));  // another kind is not held back
  lim.flush(t0 + 2s, emit);                                     // the window has not passed
  EXPECT_EQ(out, (std::vector<std::string>{"refused from a: bad", "other line"}));
  lim.flush(t0 + 6s, emit);
  EXPECT_EQ(out.back(), "999 more like this: refused: bad");
  EXPECT_EQ(out.size(), 3u);
  // After the window, a line of that kind is written again; its count before it first.
  EXPECT_TRUE(lim.log("x", "x1", t0 + 10s, emit));
  EXPECT_FALSE(lim.log("x", "x2", t0 + 11s, emit));
  EXPECT_TRUE(lim.log("x", "x3", t0 + 16s, emit));
  EXPECT_EQ(out[out.size() - 2], "1 more like this: x");
  EXPECT_EQ(out.back(), "x3");
  EXPECT_FALSE(lim.log("x", "x4", t0 + 17s, emit));
  lim.flush(t0 + 17s, emit, /*force=*/true);
  EXPECT_EQ(out.back(), "1 more like this: x");
}

TEST(LogLimiter, ManyDistinctKindsShareOneEntry) {
  LogLimiter lim;
  int lines = 0;
  auto emit = [&](const std::string&) { ++lines; };
  LogLimiter::Clock::time_point t{};
  for (int i = 0; i < 10000; ++i) lim.log("kind " + std::to_string(i), "line", t, emit);
  EXPECT_LE(lines, 65);
}

}  // namespace hvdrun
