// What the LocalAgent tests share: a sink that keeps the agent's notices (agent_test.cc,
// agent_policy_test.cc).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "launcher/output_sink.h"

namespace hvdrun {

class RecordingSink : public OutputSink {
 public:
  void write_lines(int, StreamKind, std::string_view) override {}
  bool congested() const override { return false; }
  void notice(std::string_view line) override { notices.emplace_back(line); }
  void drain() override {}
  std::vector<std::string> notices;
};

}  // namespace hvdrun
