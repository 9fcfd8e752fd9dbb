// A worker of an elastic job for runtime_elastic_test.cc: runs the commands of its
// arguments through the C API and prints one line per command on stdout:
//   init           -> "init RC RANK SIZE"
//   allreduce V    -> "allreduce RC SUM" (a blocking float sum of V)
//   async V        -> "async RC SUM" (hvd_allreduce_async named "a", then hvd_wait)
//   updates        -> "updates SEQ KINDS"
//   await N        -> "updates SEQ KINDS" once SEQ >= N (asked every 10 ms, at most 60 s)
//   shutdown       -> "shutdown RC LIVE_OPS" (operations still alive in the process)
//   pause          -> "pause", then reads a line from stdin before going on
#include <poll.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "collectives/engine/pending_op.h"
#include "hvdrun/hvdrun.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string cmd = argv[i];
    if (cmd == "init") {
      int rc = hvd_init();
      std::printf("init %d %d %d\n", rc, hvd_rank(), hvd_size());
    } else if ((cmd == "allreduce" || cmd == "async") && i + 1 < argc) {
      float x = std::stof(argv[++i]), sum = 0;
      int rc;
      if (cmd == "allreduce") {
        rc = hvd_allreduce(&x, &sum, 1, HVD_FLOAT32, HVD_OP_SUM);
      } else {
        hvd_handle_t h = 0;
        rc = hvd_allreduce_async("a", &x, &sum, 1, HVD_FLOAT32, HVD_OP_SUM, 1.0, 1.0, &h);
        if (rc == HVD_SUCCESS) rc = hvd_wait(h);
      }
      std::printf("%s %d %g\n", cmd.c_str(), rc, sum);
    } else if (cmd == "updates") {
      long long seq = -1;
      int kinds = -1;
      hvd_elastic_updates(&seq, &kinds);
      std::printf("updates %lld %d\n", seq, kinds);
    } else if (cmd == "await" && i + 1 < argc) {
      long long want = std::stoll(argv[++i]), seq = 0;
      int kinds = 0;
      for (int tries = 0; tries < 6000; ++tries) {
        hvd_elastic_updates(&seq, &kinds);
        if (seq >= want) break;
        poll(nullptr, 0, 10);
      }
      std::printf("updates %lld %d\n", seq, kinds);
    } else if (cmd == "shutdown") {
      int rc = hvd_shutdown();
      std::printf("shutdown %d %ld\n", rc, hvdrun::PendingOp::live_ops().load());
    } else if (cmd == "pause") {
      std::printf("pause\n");
      std::fflush(stdout);
      std::string line;
      std::getline(std::cin, line);
    } else {
      std::fprintf(stderr, "elastic_worker: unknown command %s\n", cmd.c_str());
      return 2;
    }
    std::fflush(stdout);
  }
  return 0;
}
