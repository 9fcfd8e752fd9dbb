// Host lists: `-H a:2,b:4,[::1]:2` and host files (`host slots=N`, `host:N`, `host`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hvdrun {

// Bounds checked before any planning (exit 2 past them).
constexpr long long kMaxSlotsPerHost = 1 << 20;  // one host's slots, summed over repeats
constexpr long long kMaxJobRanks = 1 << 20;      // ranks in one job
constexpr size_t kMaxHostNameBytes = 253;        // a DNS name's longest
constexpr size_t kMaxHostfileBytes = 16u << 20;  // a host file's size

struct HostSlots {
  std::string host;  // as the user wrote it (IPv6 without the brackets)
  int slots = 0;
  bool operator==(const HostSlots&) const = default;
};

// Adds `slots` to `host`, keeping first-appearance order (a host named twice gets its slots
// added, up to kMaxSlotsPerHost). Linear in the hosts: for one or a few.
void add_host(std::vector<HostSlots>& hosts, const std::string& host, int slots);

// Checks a host name or address as it will be used (IPv6 without the brackets): not empty,
// not an option ("-oProxyCommand=..."), only the characters of host names and addresses,
// at most kMaxHostNameBytes. Returns "" when fine, else the error (the name quoted).
std::string check_host_name(std::string_view host);

// Parses one `-H` value. Errors name the bad token and what was expected.
Result<std::vector<HostSlots>> parse_host_list(std::string_view list);

// Parses the text of a host file in linear time; `filename` is used in errors
// ("FILE:LINE: ..."). A UTF-8 byte order mark at the start is skipped.
Result<std::vector<HostSlots>> parse_hostfile_text(std::string_view text, const std::string& filename);
// Reads a host file: a regular file of at most kMaxHostfileBytes (a directory, a device such
// as /dev/zero or a pipe is refused before reading).
Result<std::vector<HostSlots>> read_hostfile(const std::string& path);

// The sum of every host's slots, in 64 bits.
long long total_slots(const std::vector<HostSlots>& hosts);

}  // namespace hvdrun
