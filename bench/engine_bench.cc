// hvdrun-engine-bench: the collective engine on a training step's gradients. Run it under
// hvdrun:   hvdrun -np 2 hvdrun-engine-bench [-n ITERS] [-w WARMUP] [-l LATENCY_ITERS]
//
// A step is 100 float32 tensors with the sizes of ResNet-50's first 100 parameters
// (torchvision's order, listed below), handled three ways:
//   async   submitted with hvd_allreduce_async in reverse order, as backward produces
//           them, then all waited for (the engine negotiates and fuses them)
//   (a)     the same tensors as blocking hvd_allreduce calls, one by one
//   (b)     one blocking hvd_allreduce of all the elements at once (the fused ideal)
// and the latency of one 4 KiB hvd_allreduce_async + hvd_wait on an idle engine, next to
// the blocking hvd_allreduce of 4 KiB. Rank 0 prints the times (slowest rank) and ratios.
#include <getopt.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"

namespace {

void check(int rc, const char* what) {
  if (rc != 0) {
    std::fprintf(stderr, "hvdrun-engine-bench: %s failed (%d): %s\n", what, rc, hvd_last_error());
    std::exit(1);
  }
}

// ResNet-50 (torchvision) parameter element counts, in named_parameters() order.
std::vector<size_t> resnet50_params() {
  std::vector<size_t> p = {64 * 3 * 7 * 7, 64, 64};  // conv1, bn1
  const int blocks[4] = {3, 4, 6, 3}, widths[4] = {64, 128, 256, 512};
  size_t in = 64;
  for (int l = 0; l < 4; ++l) {
    size_t w = static_cast<size_t>(widths[l]), out = 4 * w;
    for (int b = 0; b < blocks[l]; ++b) {
      p.insert(p.end(), {w * in, w, w, w * w * 9, w, w, out * w, out, out});
      if (b == 0) p.insert(p.end(), {out * in, out, out});  // downsample conv + bn
      in = out;
    }
  }
  p.insert(p.end(), {1000 * 2048, 1000});  // fc
  return p;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double slowest(double t) {
  double m = t;
  check(hvd_allreduce(&t, &m, 1, HVD_FLOAT64, HVD_OP_MAX), "allreduce(time)");
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 5, warmup = 2, lat_iters = 2000, opt;
  while ((opt = getopt(argc, argv, "n:w:l:h")) != -1) {
    switch (opt) {
      case 'n': iters = std::atoi(optarg); break;
      case 'w': warmup = std::atoi(optarg); break;
      case 'l': lat_iters = std::atoi(optarg); break;
      default:
        std::printf("usage: hvdrun-engine-bench [-n ITERS] [-w WARMUP] [-l LATENCY_ITERS]\n");
        return opt == 'h' ? 0 : 2;
    }
  }
  if (iters < 1 || warmup < 0 || lat_iters < 1) {
    std::fprintf(stderr, "hvdrun-engine-bench: bad arguments (see -h)\n");
    return 2;
  }
  check(hvd_init(), "hvd_init");
  const int rank = hvd_rank(), n = hvd_size();
  std::vector<size_t> sizes = resnet50_params();
  sizes.resize(100);
  size_t total = 0;
  for (auto s : sizes) total += s;
  std::vector<std::vector<float>> in(sizes.size()), out(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    in[i].assign(sizes[i], 1.f + static_cast<float>(rank));
    out[i].assign(sizes[i], 0.f);
  }
  std::vector<float> flat(total, 1.f), flat_out(total);
  std::vector<std::string> names;
  for (size_t i = 0; i < sizes.size(); ++i) names.push_back("grad." + std::to_string(i));

  auto step_async = [&] {
    std::vector<hvd_handle_t> h(sizes.size());
    for (size_t k = sizes.size(); k-- > 0;)
      check(hvd_allreduce_async(names[k].c_str(), in[k].data(), out[k].data(), sizes[k], HVD_FLOAT32, HVD_OP_AVERAGE,
                                1.0, 1.0, &h[k]),
            "hvd_allreduce_async");
    for (size_t k = sizes.size(); k-- > 0;) check(hvd_wait(h[k]), "hvd_wait");
  };
  auto step_blocking = [&] {
    for (size_t k = sizes.size(); k-- > 0;)
      check(hvd_allreduce(in[k].data(), out[k].data(), sizes[k], HVD_FLOAT32, HVD_OP_AVERAGE), "hvd_allreduce");
  };
  auto step_fused = [&] {
    check(hvd_allreduce(flat.data(), flat_out.data(), total, HVD_FLOAT32, HVD_OP_AVERAGE), "hvd_allreduce");
  };
  auto time_it = [&](auto&& fn, int count) {
    for (int i = 0; i < warmup; ++i) fn();
    check(hvd_barrier(), "barrier");
    double t0 = now_s();
    for (int i = 0; i < count; ++i) fn();
    return slowest((now_s() - t0) / count);
  };
  // Interleaved rounds, so that a change in machine load hits all three alike.
  double t_async = 1e30, t_block = 1e30, t_fused = 1e30;
  for (int round = 0; round < 2; ++round) {
    t_async = std::min(t_async, time_it(step_async, iters));
    t_block = std::min(t_block, time_it(step_blocking, iters));
    t_fused = std::min(t_fused, time_it(step_fused, iters));
  }
  // Result check (average of 1..n).
  float expect = (n + 1) / 2.0f;
  for (size_t k = 0; k < sizes.size(); ++k)
    if (out[k][0] != expect || out[k][sizes[k] - 1] != expect) {
      std::fprintf(stderr, "rank %d: tensor %zu wrong: %f != %f\n", rank, k, out[k][0], expect);
      return 1;
    }

  std::vector<float> a(1024, 1.f), b(1024);
  auto lat_async = [&] {
    hvd_handle_t h;
    check(hvd_allreduce_async("latency.4k", a.data(), b.data(), 1024, HVD_FLOAT32, HVD_OP_SUM, 1.0, 1.0, &h), "async");
    check(hvd_wait(h), "wait");
  };
  auto lat_block = [&] { check(hvd_allreduce(a.data(), b.data(), 1024, HVD_FLOAT32, HVD_OP_SUM), "hvd_allreduce"); };
  double l_async = 1e30, l_block = 1e30;
  for (int round = 0; round < 2; ++round) {
    l_async = std::min(l_async, time_it(lat_async, lat_iters));
    l_block = std::min(l_block, time_it(lat_block, lat_iters));
  }
  if (rank == 0) {
    std::printf("# hvdrun-engine-bench: %d ranks, 100 ResNet-50 gradients (%zu floats, %.1f MiB), %d iterations\n", n,
                total, total * 4.0 / (1 << 20), iters);
    std::printf("async step (reverse order, then wait):  %9.2f ms\n", t_async * 1e3);
    std::printf("(a) blocking, one by one:               %9.2f ms   (a)/async = %.2f\n", t_block * 1e3,
                t_block / t_async);
    std::printf("(b) one fused blocking allreduce:       %9.2f ms   async/(b) = %.2f\n", t_fused * 1e3,
                t_async / t_fused);
    std::printf("4 KiB async allreduce + wait:           %9.1f us\n", l_async * 1e6);
    std::printf("4 KiB blocking allreduce (engine path): %9.1f us\n", l_block * 1e6);
  }
  check(hvd_shutdown(), "hvd_shutdown");
  return 0;
}
