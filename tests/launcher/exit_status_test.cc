// The exit-code table: every kind has one row, the codes are what the man page says, and
// the man page's EXIT STATUS section names every kind with its code.
#include "launcher/exit_status.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

namespace hvdrun {
namespace {

std::string exit_status_section() {
  std::ifstream f(std::string(TEST_SOURCE_DIR) + "/../man/hvdrun.1");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string man = ss.str();
  size_t a = man.find(".SH EXIT STATUS");
  size_t b = man.find(".SH", a + 1);
  EXPECT_NE(a, std::string::npos);
  return man.substr(a, b - a);
}

TEST(ExitStatus, EveryKindHasOneRow) {
  std::set<int> seen;
  for (const auto& r : exit_status_table()) EXPECT_TRUE(seen.insert(static_cast<int>(r.kind)).second) << r.name;
  for (int k = 0; k <= static_cast<int>(ErrorKind::kInternal); ++k) EXPECT_TRUE(seen.count(k)) << "kind " << k;
}

TEST(ExitStatus, KindDecidesTheCode) {
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kUsage, "x")), 2);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kBadHostFile, "x")), 2);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kAuth, "x")), 3);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kStartTimeout, "x")), 4);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kLostContact, "x")), 5);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kRankExitedEarly, "x")), 6);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kNotFound, "x")), 127);
  // The kind wins over a code that says something else.
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kUsage, "x", 3)), 2);
  // Kinds whose code is the error's own, and errors without a kind.
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kRankFailed, "x", 42)), 42);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kRankKilled, "x", 137)), 137);
  EXPECT_EQ(exit_code_for(make_error("x", 9)), 9);
  EXPECT_EQ(exit_code_for(make_error("x", 0)), 1);  // an error never exits 0
  // Context keeps the kind.
  EXPECT_EQ(wrap(make_error(ErrorKind::kAuth, "x"), "host a").kind, ErrorKind::kAuth);
  EXPECT_EQ(error_of(ErrorKind::kUsage, "x").code, 2);
}

TEST(ExitStatus, KindsFromTheWire) {
  EXPECT_EQ(error_kind_from_int(static_cast<int>(ErrorKind::kResourceLimit)), ErrorKind::kResourceLimit);
  EXPECT_EQ(error_kind_from_int(-1), ErrorKind::kUnspecified);
  EXPECT_EQ(error_kind_from_int(100000), ErrorKind::kUnspecified);
}

TEST(ExitStatus, ManPageNamesEveryKindWithItsCode) {
  std::string sec = exit_status_section();
  for (const auto& r : exit_status_table()) {
    if (r.kind == ErrorKind::kUnspecified || r.kind == ErrorKind::kTimeout || r.kind == ErrorKind::kPeerLost) continue;
    size_t at = sec.find(std::string(r.name) + ":");
    ASSERT_NE(at, std::string::npos) << "man page EXIT STATUS lacks '" << r.name << ":'";
    // The code heading the entry: the last ".B N" or ".I ..." before the name.
    size_t b = sec.rfind("\n.B ", at), i = sec.rfind("\n.I ", at);
    if (r.exit_code >= 0) {
      ASSERT_NE(b, std::string::npos);
      ASSERT_TRUE(i == std::string::npos || b > i) << r.name;
      int code = std::stoi(sec.substr(b + 4));
      EXPECT_EQ(code, r.exit_code) << r.name;
    } else {
      ASSERT_NE(i, std::string::npos) << r.name;
      ASSERT_TRUE(b == std::string::npos || i > b) << r.name;
    }
  }
}

}  // namespace
}  // namespace hvdrun
