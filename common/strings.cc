#include "common/strings.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace hvdrun {

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.emplace_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n\v\f";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

Result<long long> parse_int(std::string_view s, std::string_view what, long long min, long long max) {
  long long v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) {
    return make_error(ErrorKind::kUsage, std::string(what) + " '" + std::string(s) + "': expected an integer");
  }
  if (v < min || v > max) {
    return make_error(ErrorKind::kUsage, std::string(what) + " '" + std::string(s) + "': expected an integer from " +
                                             std::to_string(min) + " to " + std::to_string(max));
  }
  return v;
}

Result<double> parse_double(std::string_view s, std::string_view what, double min, double max) {
  std::string str(s);
  char* end = nullptr;
  double v = std::strtod(str.c_str(), &end);
  if (str.empty() || end != str.c_str() + str.size() || !std::isfinite(v)) {
    return make_error(ErrorKind::kUsage, std::string(what) + " '" + str + "': expected a number");
  }
  if (v < min || v > max) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s '%s': expected a number from %g to %g", std::string(what).c_str(), str.c_str(), min,
             max);
    return make_error(ErrorKind::kUsage, buf);
  }
  return v;
}

std::string printable(std::string_view s, size_t max, bool keep_backslash) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  size_t n = std::min(s.size(), max);
  out.reserve(n + 8);
  for (size_t i = 0; i < n; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\' && !keep_backslash) {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(digits[c >> 4]);
      out.push_back(digits[c & 15]);
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

std::string to_hex(const void* data, size_t len) {
  static const char* digits = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out(len * 2, '0');
  for (size_t i = 0; i < len; ++i) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  return out;
}

Result<std::string> from_hex(std::string_view hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2) return make_error(ErrorKind::kMalformed, "odd-length hex string");
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return make_error(ErrorKind::kMalformed, "invalid hex digit");
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

}  // namespace hvdrun
