// libFuzzer target: Horovod's --config-file YAML (parse_config_text). Every answer is a
// list of known flags, or one printable line naming what is wrong.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "launcher/horovod_flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto cfg = hvdrun::parse_config_text(in, "--config-file 'fuzz'");
  if (!cfg) {
    const std::string& m = cfg.error().message;
    if (m.rfind("--config-file 'fuzz': ", 0) != 0) __builtin_trap();
    for (unsigned char c : m)
      if (c < 0x20 || c >= 0x7f) __builtin_trap();  // one printable line
  } else {
    for (const auto& [flag, value] : *cfg)
      if (flag.rfind("--", 0) != 0) __builtin_trap();  // every key maps to a flag
  }
  return 0;
}
