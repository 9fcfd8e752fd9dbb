// The exit-code table: every kind has one row, the codes are what the man page says, and
// the man page's EXIT STATUS section names every kind with its code.
#include "launcher/exit_status.h"

#include <gtest/gtest.h>

#include <cerrno>
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
  for (int k = static_cast<int>(kFirstErrorKind); k <= static_cast<int>(kLastErrorKind); ++k)
    EXPECT_TRUE(seen.count(k)) << "kind " << k;
  EXPECT_EQ(seen.size(), static_cast<size_t>(kLastErrorKind) - static_cast<size_t>(kFirstErrorKind) + 1);
}

TEST(ExitStatus, KindDecidesTheCode) {
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kUsage, "x")), 2);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kBadHostFile, "x")), 2);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kAuth, "x")), 3);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kLaunchFailed, "x")), 3);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kStartTimeout, "x")), 4);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kLostContact, "x")), 5);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kRankExitedEarly, "x")), 6);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kOutputFailed, "x")), 7);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kNotExecutable, "x")), 126);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kNotFound, "x")), 127);
  EXPECT_EQ(exit_code_for(make_error(ErrorKind::kInternal, "x")), 1);
  // The worker side's kinds, and the lower layers', are hvdrun's own failure if one ends it.
  for (ErrorKind k : {ErrorKind::kTimeout, ErrorKind::kPeerLost, ErrorKind::kInvalidArgument, ErrorKind::kSystem,
                      ErrorKind::kMalformed, ErrorKind::kMissingKey, ErrorKind::kRendezvous})
    EXPECT_EQ(exit_code_for(make_error(k, "x")), 1) << error_kind_name(k);
  // errno is context: it never decides the code.
  EXPECT_EQ(exit_code_for(make_sys_error(ErrorKind::kUsage, "x", ENOENT)), 2);
  EXPECT_EQ(exit_code_for(make_sys_error(ErrorKind::kSystem, "x", ETIMEDOUT)), 1);
  // Kinds whose code is the error's own: the rank's, 128 + a signal.
  EXPECT_EQ(exit_code_for(rank_error(ErrorKind::kRankFailed, "x", 42)), 42);
  EXPECT_EQ(exit_code_for(rank_error(ErrorKind::kRankKilled, "x", 137)), 137);
  EXPECT_EQ(exit_code_for(rank_error(ErrorKind::kInterrupted, "x", 130)), 130);
  EXPECT_EQ(exit_code_for(rank_error(ErrorKind::kRankFailed, "x", 0)), 1);  // an error never exits 0
  // Context keeps the kind and its context.
  Error wrapped = wrap(make_sys_error(ErrorKind::kAuth, "x", EACCES), "host a");
  EXPECT_EQ(wrapped.kind, ErrorKind::kAuth);
  EXPECT_EQ(wrapped.sys_errno, EACCES);
  EXPECT_EQ(wrapped.message, "host a: x");
  EXPECT_EQ(exit_code_for(error_of(ErrorKind::kUsage, "x")), 2);
}

TEST(ExitStatus, KindsFromTheWire) {
  EXPECT_EQ(error_kind_from_int(static_cast<int>(ErrorKind::kResourceLimit), ErrorKind::kLaunchFailed),
            ErrorKind::kResourceLimit);
  EXPECT_EQ(error_kind_from_int(static_cast<int>(kLastErrorKind), ErrorKind::kLaunchFailed), kLastErrorKind);
  // The numbers agents send: a kind's number never changes.
  EXPECT_EQ(static_cast<int>(ErrorKind::kUsage), 1);
  EXPECT_EQ(static_cast<int>(ErrorKind::kInternal), 18);
  EXPECT_EQ(error_kind_from_int(0, ErrorKind::kLaunchFailed), ErrorKind::kLaunchFailed);
  EXPECT_EQ(error_kind_from_int(-1, ErrorKind::kLaunchFailed), ErrorKind::kLaunchFailed);
  EXPECT_EQ(error_kind_from_int(100000, ErrorKind::kInternal), ErrorKind::kInternal);
}

TEST(ExitStatus, ManPageNamesEveryKindWithItsCode) {
  std::string sec = exit_status_section();
  for (const auto& r : exit_status_table()) {
    // The worker side's kinds and the lower layers' are no outcome of hvdrun's own.
    if (r.kind > ErrorKind::kInternal || r.kind == ErrorKind::kTimeout || r.kind == ErrorKind::kPeerLost) continue;
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
