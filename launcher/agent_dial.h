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

Result<UniqueFd> dial_launcher(const std::string& spec, const std::string& node);

}  // namespace hvdrun
