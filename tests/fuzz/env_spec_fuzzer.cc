// libFuzzer target: `-x NAME[=VALUE]` specs (parse_env_overrides), one spec per line.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "launcher/worker_env.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> specs;
  size_t start = 0;
  while (start <= in.size() && specs.size() < 64) {
    size_t nl = in.find('\n', start);
    if (nl == std::string::npos) nl = in.size();
    specs.push_back(in.substr(start, nl - start));
    start = nl + 1;
  }
  static const std::map<std::string, std::string> env = {
      {"HOME", "/root"}, {"PATH", "/usr/bin:/bin"}, {"NCCL_SOCKET_IFNAME", "ib0"}, {"EMPTY", ""}};
  auto r = hvdrun::parse_env_overrides(specs, env);
  if (r)
    for (const auto& o : *r)
      if (o.name.empty() || o.name.find('=') != std::string::npos) __builtin_trap();
  return 0;
}
