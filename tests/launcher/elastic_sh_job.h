// An elastic agent job for the tests that drive an agent's elastic loop: one slot whose
// program is sh, with this process's PATH (and `extra`) in its environment.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "launcher/agent_messages.h"

namespace hvdrun {

inline AgentJob elastic_sh_job(const std::string& host, const std::vector<std::string>& extra = {}) {
  const char* path = std::getenv("PATH");
  std::vector<std::string> env{std::string("PATH=") + (path ? path : "/usr/bin:/bin")};
  env.insert(env.end(), extra.begin(), extra.end());
  AgentJob job;
  job.host = host;
  job.cwd = "/";
  job.kill_grace = 2;
  job.elastic = true;
  job.ranks.push_back({0, {"sh"}, env});
  return job;
}

}  // namespace hvdrun
