#include "launcher/line_splitter.h"

#include <gtest/gtest.h>

#include "launcher/output_sink.h"

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

TEST(OutputTag, Prefix) {
  EXPECT_EQ(tag_line_prefix(3, StreamKind::kStdout, false), "[3]<stdout>:");
  EXPECT_EQ(tag_line_prefix(12, StreamKind::kStderr, false), "[12]<stderr>:");
  std::string ts = tag_line_prefix(0, StreamKind::kStdout, true);
  EXPECT_EQ(ts.size(), std::string("2026-12-02 12:00:00.000 [0]<stdout>:").size()) << ts;
}

}  // namespace hvdrun
