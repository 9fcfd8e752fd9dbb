// libFuzzer target: `-H` host lists (parse_host_list) and the rank plan made from them.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "launcher/hosts.h"
#include "launcher/rank_assignment.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto hosts = hvdrun::parse_host_list(in);
  if (hosts) {
    for (const auto& h : *hosts) {
      if (h.host.empty() || h.host[0] == '-') __builtin_trap();  // never an option for ssh
      if (h.slots < 1 || h.slots > hvdrun::kMaxSlotsPerHost) __builtin_trap();
    }
    // Plans only what is small enough to plan quickly (the bound itself is tested).
    if (hvdrun::total_slots(*hosts) <= 4096) (void)hvdrun::assign_ranks(*hosts, 0);
    (void)hvdrun::assign_ranks(*hosts, 3);
  }
  return 0;
}
