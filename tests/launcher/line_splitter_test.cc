#include "launcher/line_splitter.h"

#include <gtest/gtest.h>

namespace hvdrun {

std::vector<std::string> lines_of(std::string_view s) {
  std::vector<std::string> out;
  for_each_line(s, [&](std::string_view l) { out.emplace_back(l); });
  return out;
}

TEST(LineSplitter, WholeLinesOnlyAndCarriageReturns) {
  LineSplitter sp;
  EXPECT_EQ(sp.feed("ab"), "");
  EXPECT_EQ(sp.feed("c\nde"), "abc\n");
  EXPECT_EQ(sp.feed("f\r10%\r20"), "def\r10%\r");
  EXPECT_EQ(sp.flush(), "20\n");
  EXPECT_EQ(sp.flush(), "");
  EXPECT_EQ(lines_of("a\nb\rc\n"), (std::vector<std::string>{"a\n", "b\r", "c\n"}));
}

TEST(LineSplitter, VeryLongLineIsPassedOnInPieces) {
  LineSplitter sp;
  std::string big(LineSplitter::kMaxLine, 'x');
  auto out = sp.feed(big);
  EXPECT_EQ(out.size(), big.size() + 1);
  EXPECT_EQ(out.back(), '\n');
}

}  // namespace hvdrun
