#include "common/strings.h"

#include <gtest/gtest.h>

namespace hvdrun {

TEST(Strings, ParseIntAcceptsRangeAndNamesBadValues) {
  EXPECT_EQ(*parse_int("42", "n", 0, 100), 42);
  auto bad = parse_int("4x", "-np", 1, 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "-np '4x': expected an integer");
  EXPECT_EQ(bad.error().kind, ErrorKind::kUsage);
  auto out = parse_int("11", "-np", 1, 10);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().message, "-np '11': expected an integer from 1 to 10");
  EXPECT_FALSE(parse_int("", "n", 0, 1).ok());
  EXPECT_FALSE(parse_int(" 1", "n", 0, 1).ok());
}

TEST(Strings, ParseDouble) {
  EXPECT_DOUBLE_EQ(*parse_double("2.5", "t", 0, 10), 2.5);
  EXPECT_FALSE(parse_double("nan", "t", 0, 10).ok());
  EXPECT_FALSE(parse_double("1e3", "t", 0, 10).ok());
  EXPECT_FALSE(parse_double("1s", "t", 0, 10).ok());
}

TEST(Strings, SplitTrimHex) {
  EXPECT_EQ(split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(trim("  x y \t"), "x y");
  std::string bytes("\x00\xff\x10", 3);
  EXPECT_EQ(to_hex(bytes.data(), bytes.size()), "00ff10");
  EXPECT_EQ(*from_hex("00ff10"), bytes);
  EXPECT_FALSE(from_hex("0g").ok());
  EXPECT_FALSE(from_hex("abc").ok());
}

}  // namespace hvdrun

namespace hvdrun {

TEST(Strings, PrintableQuotesUnprintableBytesAndTruncates) {
  EXPECT_EQ(printable("node1"), "node1");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable("\x1b[2J\xef\xbb\xbf\\"), "\\x1b[2J\\xef\\xbb\\xbf\\\\");
  EXPECT_EQ(printable("abcdef", 3), "abc...");
  EXPECT_EQ(printable("\\x1b\x1b", 80, /*keep_backslash=*/true), "\\x1b\\x1b");
}

}  // namespace hvdrun
