// Load on a running job's rendezvous server, from inside the job (it has the secret):
// IDLE authenticated connections that stay silent, and RATE requests per second (get, set,
// add, in turn) from THREADS connections, for SECONDS or until SIGTERM. Then prints what it did and
// hvdrun's memory (VmRSS, VmHWM of HVDRUN_PID from /proc). scripts/bench-load.sh runs it
// next to hvdrun-bench and compares the collectives' times with and without it.
// Usage (inside a rank): hvdrun_rendezvous_load IDLE RATE THREADS SECONDS HVDRUN_PID
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/tunables.h"
#include "rendezvous/auth.h"
#include "rendezvous/client.h"

using namespace hvdrun;
using namespace hvdrun::rdv;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<bool> stop{false};
void on_term(int) { stop = true; }

std::string proc_status(int pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return line.substr(field.size() + 1);
  return "?";
}

// CPU seconds (user + system) that process `pid` has used.
double cpu_seconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  // After "pid (comm)": state is field 3; utime and stime are fields 14 and 15.
  std::istringstream rest(stat.substr(paren + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: hvdrun_rendezvous_load IDLE RATE THREADS SECONDS HVDRUN_PID\n");
    return 2;
  }
  const int idle = std::atoi(argv[1]), rate = std::atoi(argv[2]), threads = std::atoi(argv[3]);
  const double seconds = std::atof(argv[4]);
  const int hvdrun_pid = std::atoi(argv[5]);
  std::string addr = tunable_string("HVDRUN_RENDEZVOUS_ADDR");
  int port = std::atoi(tunable_string("HVDRUN_RENDEZVOUS_PORT").c_str());
  auto secret = secret_from_hex(tunable_string("HVDRUN_SECRET"));
  if (addr.empty() || port == 0 || !secret) {
    std::fprintf(stderr, "hvdrun_rendezvous_load: run it inside an hvdrun job (no rendezvous in the environment)\n");
    return 2;
  }
  auto deadline = [](double s) { return Clock::now() + std::chrono::milliseconds(static_cast<long>(s * 1000)); };
  std::vector<Client> idlers;
  auto t0 = Clock::now();
  for (int i = 0; i < idle; ++i) {
    auto c = Client::connect(addr, port, *secret, deadline(30));
    if (!c) {
      std::fprintf(stderr, "hvdrun_rendezvous_load: idle connection %d: %s\n", i, c.error().message.c_str());
      return 1;
    }
    idlers.push_back(std::move(*c));
  }
  double connect_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("load: %d idle connections open in %.2f s; hvdrun VmRSS%s\n", idle, connect_s,
              proc_status(hvdrun_pid, "VmRSS").c_str());
  std::fflush(stdout);

  signal(SIGTERM, on_term);  // SIGTERM: stop and report
  std::atomic<long> done{0}, failed{0};
  std::vector<std::thread> pool;
  double cpu0 = cpu_seconds(hvdrun_pid);
  auto start = Clock::now();
  auto end = start + std::chrono::milliseconds(static_cast<long>(seconds * 1000));
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      auto c = Client::connect(addr, port, *secret, deadline(30));
      if (!c) {
        ++failed;
        return;
      }
      const double per_thread = static_cast<double>(rate) / threads;
      const auto gap = std::chrono::nanoseconds(static_cast<long>(1e9 / per_thread));
      std::string key = "load/" + std::to_string(t), value(64, 'v');
      auto next = start;
      for (long i = 0; Clock::now() < end && !stop; ++i) {
        std::this_thread::sleep_until(next);
        next += gap;
        bool ok;
        switch (i % 3) {
          case 0: ok = c->set(key, value).ok(); break;
          case 1: ok = c->get(key).ok(); break;
          default: ok = c->add(key + "/n", 1).ok(); break;
        }
        ++(ok ? done : failed);
      }
    });
  for (auto& th : pool) th.join();
  double took = std::chrono::duration<double>(Clock::now() - start).count();
  double cpu = cpu_seconds(hvdrun_pid) - cpu0;
  std::printf("load: %ld requests in %.1f s (%.0f/s), %ld failed, %zu idle connections; hvdrun used %.0f%% of a core;"
              " hvdrun VmRSS%s, VmHWM%s\n",
              done.load(), took, done / took, failed.load(), idlers.size(), 100 * cpu / took,
              proc_status(hvdrun_pid, "VmRSS").c_str(), proc_status(hvdrun_pid, "VmHWM").c_str());
  return failed ? 1 : 0;
}
