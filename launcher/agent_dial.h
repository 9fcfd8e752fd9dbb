// The srun-started agent's connection back to hvdrun ("PORT ADDR,ADDR,..." in
// HVDRUN_AGENT_CONNECT): every address hvdrun listens on, those on a network this host
// shares first (loopback only when this host shares hvdrun's network stack), in rounds
// until the start deadline, then the job's token proven (kAttach).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace hvdrun {

// `on_retry`, when set, is called after each round in which no address answered, before
// the pause that precedes the next (a test waits on it).
Result<UniqueFd> dial_launcher(const std::string& spec, const std::string& node,
                               std::chrono::steady_clock::time_point deadline,
                               const std::function<void()>& on_retry = {});

}  // namespace hvdrun
