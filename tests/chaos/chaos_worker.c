/* The chaos suite's worker (tests/chaos/chaos): a rank that says where it is, so that the
 * driver can inject a fault in a chosen phase.
 *
 *   chaos_worker MARKER DIR TARGET START_TARGET_MS START_OTHER_MS ITERS SLEEP_US END_MS
 *                LEAVE_ITER LINES [FORK_AT FORK_CALL]
 *
 * MARKER only marks the process (the driver finds its trial's processes by it). Each rank
 * writes "PID PHASE" to DIR/rank.R at each phase: start (sleeping START_*_MS before
 * hvd_init: TARGET sleeps START_TARGET_MS, the others START_OTHER_MS), rendezvous (in
 * hvd_init), collective (ITERS allreduces of 4096 floats, SLEEP_US apart, each result
 * checked), teardown (after hvd_shutdown, sleeping END_MS). TARGET exits 0 without
 * hvd_shutdown before iteration LEAVE_ITER when that is >= 0. Each rank prints LINES lines
 * of 100 bytes per iteration. TARGET forks a child before iteration FORK_AT when that is
 * >= 0 (ITERS: after the last one), or after hvd_shutdown when it is -2; the child calls
 * FORK_CALL (allreduce, async, init: each must fail with HVD_ERR_NOT_INITIALIZED; shutdown:
 * must succeed; exit: nothing) and exits, while the parent goes on and reaps it before
 * hvd_shutdown (or at the end). Any library error: the message on stderr, exit 3; a wrong
 * result: exit 4; a child that failed or was not as expected: exit 5. */
#include <hvdrun/hvdrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

/* In the forked child: the call drawn, bounded by an alarm; 0 when it did what a forked
 * child's call must do. */
static int child_call(const char* call) {
  alarm(10);
  float v = 1;
  hvd_handle_t h = 0;
  int rc = 0, want = HVD_ERR_NOT_INITIALIZED;
  if (!strcmp(call, "allreduce")) {
    rc = hvd_allreduce(&v, &v, 1, HVD_FLOAT32, HVD_OP_SUM);
  } else if (!strcmp(call, "async")) {
    rc = hvd_allreduce_async("chaos.child", &v, &v, 1, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h);
  } else if (!strcmp(call, "init")) {
    rc = hvd_init();
  } else if (!strcmp(call, "shutdown")) {
    rc = hvd_shutdown();
    want = 0;
  } else {
    want = 0;
  }
  if (rc == want) return 0;
  fprintf(stderr, "rank %d's child: %s returned %d, not %d: %s\n", g_rank, call, rc, want, hvd_last_error());
  return 5;
}

static pid_t fork_child(const char* call) {
  fflush(NULL);
  pid_t c = fork();
  if (c == 0) exit(child_call(call));
  return c;
}

/* 0 when the child (if any) exited 0. */
static int reap_child(pid_t c) {
  int status = 0;
  if (c <= 0) return c == 0 ? 0 : 5;
  if (waitpid(c, &status, 0) != c || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "rank %d: the forked child ended with status %#x\n", g_rank, status);
    return 5;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 11 && argc != 13) {
    fprintf(stderr, "usage: chaos_worker MARKER DIR TARGET START_TARGET_MS START_OTHER_MS ITERS SLEEP_US END_MS LEAVE_ITER LINES [FORK_AT FORK_CALL]\n");
    return 2;
  }
  int fork_at = argc == 13 ? atoi(argv[11]) : -1;
  const char* fork_call = argc == 13 ? argv[12] : "exit";
  pid_t child = 0;
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
    if (g_rank == target && it == fork_at) child = fork_child(fork_call);
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
  if (g_rank == target && fork_at == iters) child = fork_child(fork_call);
  if (reap_child(child)) return 5;
  hvd_shutdown();
  phase("teardown");
  if (g_rank == target && fork_at == -2 && reap_child(fork_child(fork_call))) return 5;
  usleep((useconds_t)(end_ms * 1000));
  return 0;
}
