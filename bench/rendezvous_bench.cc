// Rendezvous scale: N simulated workers (threads with small stacks) each connect,
// authenticate, register (the reply carries its ring neighbours), and pass one barrier,
// against one server in its own process. Prints the time per N.
// Usage: hvdrun_rendezvous_bench [N...]   (default 1024 4096 16384)
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rendezvous/auth.h"
#include "rendezvous/client.h"
#include "rendezvous/server.h"

using namespace hvdrun::rdv;

namespace {

struct Job {
  int size;
  int port;
  std::string secret;
  std::atomic<int> failures{0};
  std::string first_error;
  std::atomic<bool> error_taken{false};
};

struct Arg {
  Job* job;
  int rank;
};

void* worker(void* p) {
  auto* a = static_cast<Arg*>(p);
  Job& j = *a->job;
  auto deadline = Clock::now() + std::chrono::seconds(120);
  auto fail = [&](const std::string& m) {
    if (!j.error_taken.exchange(true)) j.first_error = "rank " + std::to_string(a->rank) + ": " + m;
    j.failures++;
    return nullptr;
  };
  // Spread the connections over 127.0.0.1-64 (the server listens on all of loopback): with
  // one address pair, 16K connections from one host exhaust the kernel's ephemeral port
  // search (__inet_hash_connect), which real ranks on many hosts never meet.
  std::string addr = "127.0.0." + std::to_string(1 + a->rank % 64);
  auto c = Client::connect(addr, j.port, j.secret, deadline);
  if (!c) return fail(c.error().message);
  auto g = c->register_rank({a->rank, j.size, "localhost", "127.0.0.1", 10000 + a->rank % 50000}, deadline);
  if (!g) return fail(g.error().message);
  if (g->right.rank != (a->rank + 1) % j.size) return fail("wrong right neighbour");
  auto b = c->barrier("bench", j.size, 120);
  if (!b) return fail(b.error().message);
  return nullptr;
}

double run(int n) {
  Job job;
  job.size = n;
  job.secret = new_secret();
  ServerOptions o;
  o.secret = job.secret;
  o.bind_address = "0.0.0.0";
  o.start_timeout = 0;
  o.handshake_timeout = 60;
  o.ranks.assign(n, ExpectedRank{"localhost", 0});
  // The server runs in a child process, as it runs inside hvdrun: each side then has its
  // own open-file limit (N sockets each).
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) std::exit(1);
  pid_t child = fork();
  if (child == 0) {
    close(to_child[1]);
    close(from_child[0]);
    auto server = Server::start(o, {});
    if (!server) {
      std::fprintf(stderr, "%s\n", server.error().message.c_str());
      _exit(1);
    }
    int port = (*server)->port();
    if (write(from_child[1], &port, sizeof port) != sizeof port) _exit(1);
    char c;
    while (read(to_child[0], &c, 1) > 0) {
    }
    _exit(0);
  }
  close(to_child[0]);
  close(from_child[1]);
  if (read(from_child[0], &job.port, sizeof job.port) != sizeof job.port) {
    std::fprintf(stderr, "server process failed\n");
    std::exit(1);
  }
  std::vector<Arg> args(n);
  std::vector<pthread_t> threads(n);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 128 * 1024);
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    args[r] = {&job, r};
    if (pthread_create(&threads[r], &attr, worker, &args[r]) != 0) {
      std::fprintf(stderr, "pthread_create failed at %d\n", r);
      std::exit(1);
    }
  }
  for (auto& t : threads) pthread_join(t, nullptr);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(to_child[1]);
  close(from_child[0]);
  waitpid(child, nullptr, 0);
  if (job.failures) {
    std::fprintf(stderr, "N=%d: %d failures, first: %s\n", n, job.failures.load(), job.first_error.c_str());
    std::exit(1);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {1024, 4096, 16384};
  std::printf("%8s %10s %14s\n", "ranks", "seconds", "ranks/second");
  for (int n : sizes) {
    double s = run(n);
    std::printf("%8d %10.3f %14.0f\n", n, s, n / s);
    std::fflush(stdout);
  }
}
