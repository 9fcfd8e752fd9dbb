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

// The values a numeric tunable takes (the others are words or addresses: no unit).
struct TunableRange {
  double min = 0, max = 0;
  std::string_view unit;       // "seconds", "bytes", ...; empty: not a number
  std::string_view note = "";  // appended to the refusal, e.g. " (or 0: never)"
  bool zero_too = false;       // 0 is valid as well (it leaves the setting to the system)
  std::string_view auto_means = "";  // the number "auto" stands for, where it is one
};

struct Tunable {
  std::string_view env;           // environment variable name
  std::string_view default_value; // "" = unset
  TunableUse use;                 // who reads it (kContract: set by hvdrun for workers)
  std::string_view help;
  std::string_view horovod = "";  // Horovod's spelling, honoured when ours is unset
  TunableRange range = {};
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
// "auto" reads as the range's auto_means.
double tunable_double(std::string_view env);
long long tunable_int(std::string_view env);
// The value is "auto" (set so, or by default): for tunables whose "auto" the caller decides.
bool tunable_is_auto(std::string_view env);
// The table's default as a number ("auto" as its auto_means): where the code's option
// structs take their defaults from, so that a struct made in a test or a benchmark starts
// where the runtime does.
double tunable_default(std::string_view env);

// Every numeric tunable of `use` that is set (our name or Horovod's) parses and lies in
// its range; else an error naming the variable, its value and what was expected. hvdrun
// checks the launcher's before it starts anything (exit 2), hvd_init the worker's.
Status check_tunables(TunableUse use);

}  // namespace hvdrun
