// "64", "4K", "1M", "2G" (powers of 1024) for the benchmarks' -b/-e options; anything else
// is a one-line error naming the tool and the value, exit 2.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>

inline size_t parse_size(const char* s, const char* tool) {
  char* end;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    case '\0': break;
    default:
      std::fprintf(stderr, "%s: size '%s': expected a number with an optional K, M or G\n", tool, s);
      std::exit(2);
  }
  return static_cast<size_t>(v);
}
