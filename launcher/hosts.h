// Host lists: `-H a:2,b:4,[::1]:2` and host files (`host slots=N`, `host:N`, `host`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hvdrun {

struct HostSlots {
  std::string host;  // as the user wrote it (IPv6 without the brackets)
  int slots = 0;
  bool operator==(const HostSlots&) const = default;
};

// Adds `slots` to `host`, keeping first-appearance order (a host named twice gets its slots added).
void add_host(std::vector<HostSlots>& hosts, const std::string& host, int slots);

// Parses one `-H` value. Errors name the bad token and what was expected.
Result<std::vector<HostSlots>> parse_host_list(std::string_view list);

// Parses the text of a host file; `filename` is used in errors ("FILE:LINE: ...").
Result<std::vector<HostSlots>> parse_hostfile_text(std::string_view text, const std::string& filename);
Result<std::vector<HostSlots>> read_hostfile(const std::string& path);

int total_slots(const std::vector<HostSlots>& hosts);

}  // namespace hvdrun
