// hvdrun-bench: collective bandwidth in the style of nccl-tests. Run it under hvdrun:
//   hvdrun -np 2 hvdrun-bench -b 4K -e 64M -f 4 -c
// Prints (rank 0) size, count, type, op, time (us), algbw and busbw (GB/s); with -c, checks
// every result and counts wrong elements. -n auto: per size as bench/mpi_allreduce.c times
// Open MPI (200 iterations below 1 MiB, 20 below 64 MiB, 5 above, after as many warm-ups).
#include <getopt.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "size_arg.h"

namespace {

void check(int rc, const char* what) {
  if (rc != 0) {
    std::fprintf(stderr, "hvdrun-bench: %s failed (%d): %s\n", what, rc, hvd_last_error());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t min_bytes = 4096, max_bytes = 64 << 20;
  double factor = 2;
  int warmup = 5, iters = 20;
  bool auto_iters = false;
  bool do_check = false;
  std::string coll = "allreduce";
  int opt;
  while ((opt = getopt(argc, argv, "b:e:f:w:n:co:h")) != -1) {
    switch (opt) {
      case 'b': min_bytes = parse_size(optarg, "hvdrun-bench"); break;
      case 'e': max_bytes = parse_size(optarg, "hvdrun-bench"); break;
      case 'f': factor = std::atof(optarg); break;
      case 'w': warmup = std::atoi(optarg); break;
      case 'n':
        auto_iters = std::strcmp(optarg, "auto") == 0;
        iters = auto_iters ? 1 : std::atoi(optarg);
        break;
      case 'c': do_check = true; break;
      case 'o': coll = optarg; break;
      default:
        std::printf("usage: hvdrun-bench [-b MIN] [-e MAX] [-f FACTOR] [-w WARMUP] [-n ITERS|auto] [-c] "
                    "[-o allreduce|broadcast|allgather|reducescatter]\n");
        return opt == 'h' ? 0 : 2;
    }
  }
  if (factor <= 1 || iters < 1 || min_bytes < 4 || max_bytes < min_bytes ||
      (coll != "allreduce" && coll != "broadcast" && coll != "allgather" && coll != "reducescatter")) {
    std::fprintf(stderr, "hvdrun-bench: bad arguments (see -h)\n");
    return 2;
  }
  check(hvd_init(), "hvd_init");
  const int rank = hvd_rank(), n = hvd_size();
  if (rank == 0) {
    if (auto_iters)
      std::printf("# hvdrun-bench %s, %d ranks, float32 sum, 200/20/5 warm-up + iterations by size\n", coll.c_str(), n);
    else
      std::printf("# hvdrun-bench %s, %d ranks, float32 sum, %d warm-up + %d iterations\n", coll.c_str(), n, warmup,
                  iters);
    std::printf("%12s %12s %8s %6s %10s %8s %8s %8s\n", "size(B)", "count", "type", "op", "time(us)", "algbw", "busbw",
                "#wrong");
  }
  std::vector<float> in, out;
  long total_wrong = 0;
  for (double bytes_d = static_cast<double>(min_bytes); bytes_d <= max_bytes * 1.0001; bytes_d *= factor) {
    size_t count = static_cast<size_t>(bytes_d) / 4;
    if (auto_iters) {
      const size_t bytes = count * 4;
      iters = bytes >= (64u << 20) ? 5 : bytes >= (1u << 20) ? 20 : 200;
      warmup = iters;
    }
    // reducescatter: count rows of one element, rank r keeping count/n (+1 for r < count % n).
    const size_t share = count / n + (static_cast<size_t>(rank) < count % n ? 1 : 0);
    size_t first = 0;
    for (int p = 0; p < rank; ++p) first += count / n + (static_cast<size_t>(p) < count % n ? 1 : 0);
    size_t out_count = coll == "allgather" ? count * n : coll == "reducescatter" ? share : count;
    in.assign(count, 0.f);
    out.assign(out_count, 0.f);
    auto fill = [&] {
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((rank + 1) * ((i % 7) + 1));
    };
    auto run = [&] {
      if (coll == "allreduce") check(hvd_allreduce(in.data(), out.data(), count, HVD_FLOAT32, HVD_OP_SUM), "allreduce");
      else if (coll == "reducescatter")
        check(hvd_reducescatter(in.data(), out.data(), count, 1, HVD_FLOAT32, HVD_OP_SUM), "reducescatter");
      else if (coll == "broadcast") check(hvd_broadcast(in.data(), count, HVD_FLOAT32, 0), "broadcast");
      else check(hvd_allgather(in.data(), out.data(), count, HVD_FLOAT32), "allgather");
    };
    fill();
    for (int i = 0; i < warmup; ++i) run();
    check(hvd_barrier(), "barrier");
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) run();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    // The slowest rank's time is the collective's time.
    double t = us;
    check(hvd_allreduce(&us, &t, 1, HVD_FLOAT64, HVD_OP_MAX), "allreduce(time)");
    long wrong = 0;
    if (do_check) {
      fill();
      run();
      double sum_ranks = n * (n + 1) / 2.0;
      for (size_t i = 0; i < out_count; ++i) {
        double expect;
        if (coll == "allreduce") expect = sum_ranks * ((i % 7) + 1);
        else if (coll == "reducescatter") expect = sum_ranks * (((first + i) % 7) + 1);
        else if (coll == "broadcast") expect = 1.0 * ((i % 7) + 1);
        else expect = (i / count + 1.0) * ((i % count % 7) + 1);
        double got = coll == "broadcast" ? in[i] : out[i];
        if (got != expect) ++wrong;
      }
      long all_wrong = 0;
      check(hvd_allreduce(&wrong, &all_wrong, 1, HVD_INT64, HVD_OP_SUM), "allreduce(check)");
      wrong = all_wrong;
      total_wrong += wrong;
    }
    double bytes = static_cast<double>(count) * 4;
    double algbw = bytes / (t * 1e3);  // GB/s
    // busbw as nccl-tests reckons it; reducescatter: the input's size, (n-1)/n of it per link.
    double bus = coll == "allreduce"       ? algbw * 2.0 * (n - 1) / n
                 : coll == "allgather"     ? algbw * (n - 1)
                 : coll == "reducescatter" ? algbw * (n - 1) / n
                                           : algbw;
    if (coll == "allgather") algbw *= n;
    if (rank == 0)
      std::printf("%12.0f %12zu %8s %6s %10.1f %8.3f %8.3f %8s\n", bytes, count, "float", "sum", t, algbw, bus,
                  do_check ? std::to_string(wrong).c_str() : "N/A");
    std::fflush(stdout);
  }
  hvd_shutdown();
  return total_wrong ? 1 : 0;
}
