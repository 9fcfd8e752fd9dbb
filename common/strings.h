// Small pure string helpers shared by the parsers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hvdrun {

std::vector<std::string> split(std::string_view s, char sep);
std::string_view trim(std::string_view s);
bool starts_with(std::string_view s, std::string_view prefix);

// Parses a whole decimal integer in [min, max]; `what` names the value in the error,
// e.g. parse_int("x", "slot count", 1, 1<<20) -> "slot count 'x': expected an integer".
Result<long long> parse_int(std::string_view s, std::string_view what, long long min, long long max);
Result<double> parse_double(std::string_view s, std::string_view what, double min, double max);

// `s` fit for a terminal and a one-line error: bytes outside printable ASCII become \xNN
// (a backslash becomes \\ unless `keep_backslash`: for text already quoted), and more
// than `max` bytes end in "...".
std::string printable(std::string_view s, size_t max = 80, bool keep_backslash = false);

std::string to_hex(const void* data, size_t len);
Result<std::string> from_hex(std::string_view hex);

}  // namespace hvdrun
