// horovodrun's tuning and library flags (horovod/runner/launch.py) and its --config-file
// YAML (horovod/runner/common/util/config_parser.py): the CLI11 spec of the flags, the
// file's keys, and the workers' variables they set. Part of parse_command_line (options.cc).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace CLI {
class App;
}

namespace hvdrun {

// What the command line gave for Horovod's flags (bound to CLI11's options).
struct HorovodFlagValues {
  std::map<std::string, std::string> values;  // value flags given
  std::map<std::string, bool> set;            // boolean flags given
};

// Adds the tuning flags to `app`, bound to `v` (the elastic flags: elastic_options.h).
void add_horovod_flags(CLI::App& app, HorovodFlagValues& v);

// The workers' variables ("NAME=VALUE") the flags given set, the command line winning over
// `from_config` (--config-file's flag -> value); `warnings` gets one line naming the flags
// the runtime does not act on. An error names the flag and the value.
Result<std::vector<std::string>> horovod_flag_env(const CLI::App& app, const HorovodFlagValues& v,
                                                  const std::map<std::string, std::string>& from_config,
                                                  std::vector<std::string>& warnings);

// Horovod's --config-file YAML: sections of keys, each the same as a flag. Returns (flag,
// value) pairs, "1"/"0" for booleans; an error is one printable line that starts with `what`.
constexpr size_t kMaxConfigBytes = 1u << 20;
Result<std::vector<std::pair<std::string, std::string>>> parse_config_text(std::string_view text,
                                                                           const std::string& what);
// The same, of the file at `path` (a regular file of at most kMaxConfigBytes).
Result<std::vector<std::pair<std::string, std::string>>> read_config_file(const std::string& path);

}  // namespace hvdrun
