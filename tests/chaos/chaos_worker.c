/* The chaos suite's worker (tests/chaos/chaos): a rank that says where it is, so that the
 * driver can inject a fault in a chosen phase.
 *
 *   chaos_worker MARKER DIR TARGET START_TARGET_MS START_OTHER_MS ITERS SLEEP_US END_MS
 *                LEAVE_ITER LINES
 *
 * MARKER only marks the process (the driver finds its trial's processes by it). Each rank
 * writes "PID PHASE" to DIR/rank.R at each phase: start (sleeping START_*_MS before
 * hvd_init: TARGET sleeps START_TARGET_MS, the others START_OTHER_MS), rendezvous (in
 * hvd_init), collective (ITERS allreduces of 4096 floats, SLEEP_US apart, each result
 * checked), teardown (after hvd_shutdown, sleeping END_MS). TARGET exits 0 without
 * hvd_shutdown before iteration LEAVE_ITER when that is >= 0. Each rank prints LINES lines
 * of 100 bytes per iteration. Any library error: the message on stderr, exit 3; a wrong
 * result: exit 4. */
#include <hvdrun/hvdrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char* g_dir;
static int g_rank;

static void phase(const char* name) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/rank.%d", g_dir, g_rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE* f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "%d %s\n", (int)getpid(), name);
  fclose(f);
  rename(tmp, path);
}

int main(int argc, char** argv) {
  if (argc != 11) {
    fprintf(stderr, "usage: chaos_worker MARKER DIR TARGET START_TARGET_MS START_OTHER_MS ITERS SLEEP_US END_MS LEAVE_ITER LINES\n");
    return 2;
  }
  g_dir = argv[2];
  int target = atoi(argv[3]);
  long start_target = atol(argv[4]), start_other = atol(argv[5]);
  int iters = atoi(argv[6]);
  long sleep_us = atol(argv[7]), end_ms = atol(argv[8]);
  int leave_iter = atoi(argv[9]), lines = atoi(argv[10]);
  const char* r_env = getenv("HOROVOD_RANK");
  g_rank = r_env ? atoi(r_env) : 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  phase("start");
  usleep((useconds_t)((g_rank == target ? start_target : start_other) * 1000));
  phase("rendezvous");
  if (hvd_init() != 0) {
    fprintf(stderr, "rank %d: hvd_init: %s\n", g_rank, hvd_last_error());
    return 3;
  }
  int n = hvd_size();
  enum { kCount = 4096 };
  static float buf[kCount];
  phase("collective");
  for (int it = 0; it < iters; ++it) {
    if (g_rank == target && it == leave_iter) _exit(0);
    for (int i = 0; i < kCount; ++i) buf[i] = (float)(g_rank + it + i % 7);
    if (hvd_allreduce(buf, buf, kCount, HVD_FLOAT32, HVD_OP_SUM) != 0) {
      fprintf(stderr, "rank %d: allreduce %d: %s\n", g_rank, it, hvd_last_error());
      return 3;
    }
    for (int i = 0; i < kCount; ++i) {
      float want = (float)(n * (n - 1) / 2 + n * (it + i % 7));
      if (buf[i] != want) {
        fprintf(stderr, "rank %d: allreduce %d: element %d is %g, not %g\n", g_rank, it, i, buf[i], want);
        return 4;
      }
    }
    for (int l = 0; l < lines; ++l)
      printf("rank %d iteration %d line %d %070d\n", g_rank, it, l, 0);
    if (sleep_us > 0) usleep((useconds_t)sleep_us);
  }
  hvd_shutdown();
  phase("teardown");
  usleep((useconds_t)(end_ms * 1000));
  return 0;
}
