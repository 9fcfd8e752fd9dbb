// libFuzzer target: --launch-command templates and --ssh-command lines (split_command_line,
// template_argv): the words a shell would split, never an expansion, one-line errors.
#include <cstddef>
#include <cstdint>
#include <string>

#include "launcher/launch_command.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  auto argv = hvdrun::template_argv(in, "h1", "/opt/hvdrun", 30);
  if (!argv) {
    if (argv.error().message.find('\n') != std::string::npos) __builtin_trap();  // one line
    return 0;
  }
  // The agent's words last, after at least one of the template's.
  if (argv->size() < 4 || (*argv)[argv->size() - 3] != "/opt/hvdrun" || (*argv)[argv->size() - 2] != "--agent" ||
      argv->back() != "--start-timeout=30")
    __builtin_trap();
  // Nothing was expanded: quotes and backslashes only remove bytes, and {host} (6) becomes
  // h1 (2), so the template's words hold at most its bytes (plus `-- h1` without {host}).
  size_t bytes = 0;
  for (size_t i = 0; i + 3 < argv->size(); ++i) bytes += (*argv)[i].size();
  if (bytes > in.size() + 4) __builtin_trap();
  return 0;
}
