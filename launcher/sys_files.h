// Reading /proc and /sys trees (under an injectable root, as host_facts and topology do).
#pragma once

#include <string>
#include <vector>

namespace hvdrun {

// The names in directory `path`, sorted, without "." entries; none if it cannot be read.
std::vector<std::string> dir_entries(const std::string& path);

}  // namespace hvdrun
