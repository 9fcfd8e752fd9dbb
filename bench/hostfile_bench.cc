// Host file parsing: the time per line of an N-line file of distinct hosts (issue 16.11:
// 100,000 lines took 10.4 s when each line scanned the hosts before it). Linear parsing
// keeps the time per line flat as N grows.
// Usage: hvdrun_hostfile_bench [N...]   (default 10000 100000 1000000)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "launcher/hosts.h"

int main(int argc, char** argv) {
  long defaults[] = {10000, 100000, 1000000};
  int n_sizes = argc > 1 ? argc - 1 : 3;
  for (int i = 0; i < n_sizes; ++i) {
    long n = argc > 1 ? std::atol(argv[i + 1]) : defaults[i];
    std::string text;
    for (long l = 0; l < n; ++l) text += "node" + std::to_string(l) + " slots=2\n";
    auto start = std::chrono::steady_clock::now();
    auto r = hvdrun::parse_hostfile_text(text, "bench");
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!r.ok()) {
      std::fprintf(stderr, "hvdrun_hostfile_bench: %s\n", r.error().message.c_str());
      return 1;
    }
    std::printf("%8ld lines: %8.3f s, %7.1f ns/line\n", n, s, s * 1e9 / static_cast<double>(n));
  }
  return 0;
}
