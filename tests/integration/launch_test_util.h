// The launch tests' shared parts: the hvdrun and test worker binaries, the pids a worker
// family wrote, and the check of tagged chatter lines.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "process.h"

using namespace testing_hvdrun;

namespace launch_test {

using namespace testing_hvdrun;

inline const std::string kHvdrun = HVDRUN_BIN;
inline const std::string kWorker = TEST_WORKER_BIN;

inline std::vector<std::string> hvd(std::vector<std::string> args) {
  args.insert(args.begin(), kHvdrun);
  return args;
}

// Pids written by `test_worker family` ("pid child" per line).
inline std::vector<pid_t> read_pids(const std::string& path) {
  std::vector<pid_t> out;
  std::ifstream in(path);
  for (pid_t p; in >> p;) out.push_back(p);
  return out;
}

inline unsigned checksum(const std::string& s) {
  unsigned h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

// Checks that every line of `text` is a whole, correctly tagged chatter line; counts per rank.
inline void check_chatter(const std::string& text, const std::string& stream, int np, std::vector<long>& lines_per_rank) {
  static const std::regex re(R"(^\[(\d+)\]<(stdout|stderr)>:(rank=(\d+) seq=(\d+) [a-z]+) sum=(\d+)$)");
  lines_per_rank.assign(np, 0);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    ASSERT_NE(end, std::string::npos) << "output does not end with a newline";
    std::string line = text.substr(start, end - start);
    start = end + 1;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << "mangled line: " << line.substr(0, 200);
    ASSERT_EQ(m[2].str(), stream);
    ASSERT_EQ(m[1].str(), m[4].str()) << "line of rank " << m[4] << " tagged as rank " << m[1];
    ASSERT_EQ(std::to_string(checksum(m[3].str())), m[6].str()) << line;
    lines_per_rank[std::stoi(m[1].str())]++;
  }
}

}  // namespace launch_test
