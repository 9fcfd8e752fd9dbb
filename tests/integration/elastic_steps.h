// The elastic workers' STEP lines (tests/launcher/elastic_job_worker.py,
// tests/integration/elastic_cluster_worker.py): batch, rank, size, the allreduce's sum,
// slot and pid, one a batch per rank.
#pragma once

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "process.h"

namespace {

struct Step {
  int batch, rank, size;
  std::string slot;
  long pid;
};

inline std::vector<Step> steps(const std::string& out) {
  static const std::regex re(R"(STEP batch=(\d+) rank=(\d+) size=(\d+) sum=(\d+) slot=(\S+) pid=(\d+))");
  std::vector<Step> s;
  for (const auto& line : testing_hvdrun::split_lines(out)) {
    std::smatch m;
    if (!std::regex_search(line, m, re)) continue;
    EXPECT_EQ(m[3], m[4]) << line;  // the allreduce's sum is the size: every rank took part
    s.push_back({std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), m[5], std::stol(m[6])});
  }
  return s;
}

}  // namespace
