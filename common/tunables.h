// The one table of every environment variable hvdrun and libhvdrun read or set,
// with its default and help text. Code reads tunables only through this file.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hvdrun {

enum class TunableUse { kLauncher, kWorker, kContract };

struct Tunable {
  std::string_view env;           // environment variable name
  std::string_view default_value; // "" = unset
  TunableUse use;                 // who reads it (kContract: set by hvdrun for workers)
  std::string_view help;
  std::string_view horovod = "";  // Horovod's spelling, honoured when ours is unset
};

std::span<const Tunable> all_tunables();
const Tunable* find_tunable(std::string_view env);

// The value from the environment (our name, else Horovod's alias), else the table's
// default. The name must be in the table.
std::string tunable_string(std::string_view env);
// The value from the environment (our name, else Horovod's alias) when it is set, even to
// ""; nullopt when neither is. The name must be in the table.
std::optional<std::string> tunable_if_set(std::string_view env);
// Parsed as a number; a malformed value is reported once on stderr and the default used
// (check_tunables refuses such values first, where a program starts).
double tunable_double(std::string_view env);
long long tunable_int(std::string_view env);

// Every numeric tunable of `use` that is set (our name or Horovod's) parses and lies in
// its range; else an error naming the variable, its value and what was expected. hvdrun
// checks the launcher's before it starts anything (exit 2), hvd_init the worker's.
Status check_tunables(TunableUse use);

}  // namespace hvdrun
