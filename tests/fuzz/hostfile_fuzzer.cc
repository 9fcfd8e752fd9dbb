// libFuzzer target: host file text (parse_hostfile_text). Errors must be one printable line.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "launcher/hosts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto hosts = hvdrun::parse_hostfile_text(in, "fuzz");
  if (!hosts) {
    for (unsigned char c : hosts.error().message)
      if (c < 0x20 || c >= 0x7f) __builtin_trap();  // unprintable bytes must be quoted
  } else {
    for (const auto& h : *hosts)
      if (h.host.empty() || h.host[0] == '-' || h.slots < 1 || h.slots > hvdrun::kMaxSlotsPerHost) __builtin_trap();
  }
  return 0;
}
