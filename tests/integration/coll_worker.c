/* Multi-process collectives under hvdrun:
 *   coll_worker check   allreduce (1M+3, in place and not), broadcast from every root, allgather;
 *                       prints how many shared-memory segments this rank has mapped
 *   coll_worker die     rank 1 is SIGKILLed in the middle of a large allreduce loop
 *   coll_worker die-stay  the same, the others ignoring SIGTERM (so that they fail on their own)
 *   coll_worker mismatch  rank 1 calls with a different count
 *   coll_worker leave   rank 1 exits 0 without hvd_shutdown while the others allreduce
 *   coll_worker fork collective|shutdown
 *                       every rank forks with an async allreduce pending; the child calls
 *                       every collective and hvd_init (each must fail, naming the fork) or
 *                       hvd_shutdown, then exits; the parent reaps it and allreduces again,
 *                       checking the results ("rank R fork ok") */
#include <hvdrun/hvdrun.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(call)                                                                      \
  do {                                                                                   \
    int rc_ = (call);                                                                    \
    if (rc_ != 0) {                                                                      \
      fprintf(stderr, "rank %d: %s failed (%d): %s\n", hvd_rank(), #call, rc_, hvd_last_error()); \
      return 10 + rc_;                                                                   \
    }                                                                                    \
  } while (0)

/* Shared-memory rings are memfds named hvdrun-shm: count their mappings. */
static int shared_segments(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  int k = 0;
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (strstr(line, "/memfd:hvdrun-shm")) ++k;
  fclose(f);
  return k;
}

static void* killer(void* arg) {
  (void)arg;
  usleep(100 * 1000);
  raise(SIGKILL);
  return NULL;
}


/* In a forked child: every call that acts on the job fails with HVD_ERR_NOT_INITIALIZED
 * and a message that names the fork; the queries answer the parent's values. */
#define REFUSED(call)                                                                        \
  do {                                                                                       \
    int rc_ = (call);                                                                        \
    if (rc_ != HVD_ERR_NOT_INITIALIZED || !strstr(hvd_last_error(), "is a fork of")) {       \
      fprintf(stderr, "rank %d child: %s returned %d: %s\n", r, #call, rc_, hvd_last_error()); \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

static int child_collectives(int r, int n, hvd_handle_t pending) {
  float x[8] = {0}, y[64] = {0};
  size_t rows[64] = {0}, counts[1] = {8}, splits[64] = {0};
  const void* sends[1] = {x};
  void* recvs[1] = {y};
  void* out = NULL;
  int last = -1;
  hvd_handle_t h = 0;
  if (hvd_rank() != r || hvd_size() != n || hvd_initialized() != 1) {
    fprintf(stderr, "rank %d child: sees rank %d of %d\n", r, hvd_rank(), hvd_size());
    return 1;
  }
  splits[0] = 8;
  REFUSED(hvd_allreduce(x, y, 8, HVD_FLOAT32, HVD_OP_SUM));
  REFUSED(hvd_broadcast(x, 8, HVD_FLOAT32, 0));
  REFUSED(hvd_allgather(x, y, 8, HVD_FLOAT32));
  REFUSED(hvd_barrier());
  REFUSED(hvd_wait(pending));
  REFUSED(hvd_result_rows(pending, rows));
  REFUSED(hvd_wait_result(pending, y));
  if (hvd_poll(pending) != -1) return 1;
  REFUSED(hvd_allreduce_async("child", x, y, 8, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h));
  REFUSED(hvd_broadcast_async("child", x, 8, HVD_FLOAT32, 0, &h));
  REFUSED(hvd_grouped_allreduce_async("child", 1, sends, recvs, counts, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h));
  REFUSED(hvd_allgatherv_async("child", x, 8, 1, HVD_FLOAT32, &h));
  REFUSED(hvd_alltoall_async("child", x, 8, 1, splits, HVD_FLOAT32, &h));
  REFUSED(hvd_reducescatter_async("child", x, y, 8, 1, HVD_FLOAT32, HVD_OP_SUM, &h));
  REFUSED(hvd_join(&last));
  REFUSED(hvd_grouped_allreduce(1, sends, recvs, counts, HVD_FLOAT32, HVD_OP_SUM));
  REFUSED(hvd_allgatherv(x, 8, 1, HVD_FLOAT32, &out, rows));
  REFUSED(hvd_alltoall(x, 8, 1, splits, HVD_FLOAT32, &out, rows));
  REFUSED(hvd_reducescatter(x, y, 8, 1, HVD_FLOAT32, HVD_OP_SUM));
  REFUSED(hvd_init());
  if (!strstr(hvd_last_error(), "no rank of its own")) return 1;
  return hvd_rank() == r ? 0 : 1;
}

static int child_shutdown(int r) {
  int rc = hvd_shutdown();
  if (rc != 0 || hvd_initialized() != 0) {
    fprintf(stderr, "rank %d child: hvd_shutdown returned %d (%s), initialized %d\n", r, rc, hvd_last_error(),
            hvd_initialized());
    return 1;
  }
  return 0;
}

/* Forks with an allreduce pending; the child (bounded by an alarm) runs `what` and exits;
 * the parent reaps it, then checks its own collectives. */
static int fork_mode(const char* what, int r, int n, float* a, float* b, size_t count) {
  for (size_t i = 0; i < count; ++i) a[i] = (float)(r + 1);
  CHECK(hvd_allreduce(a, b, count, HVD_FLOAT32, HVD_OP_SUM));
  hvd_handle_t pending = 0;
  CHECK(hvd_allreduce_async("fork.pending", a, b, count, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &pending));
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    alarm(20);
    int rc = !strcmp(what, "shutdown") ? child_shutdown(r) : child_collectives(r, n, pending);
    /* _exit, as a child of a threaded process should: its copy of the parent's memory is
     * reachable only from threads it does not have, which LeakSanitizer's exit-time check
     * reports as leaked (in the ASan build, whenever the engine thread held an allocation
     * at the fork). */
    fflush(NULL);
    _exit(rc);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "rank %d: the forked child failed (status %#x)\n", r, status);
    return 6;
  }
  CHECK(hvd_wait(pending));
  for (int it = 0; it < 3; ++it) {
    for (size_t i = 0; i < count; ++i) a[i] = (float)(r + 1 + it + i % 3);
    CHECK(hvd_allreduce(a, b, count, HVD_FLOAT32, HVD_OP_SUM));
    for (size_t i = 0; i < count; ++i)
      if (b[i] != (float)(n * (n + 1) / 2 + n * (it + (int)(i % 3)))) {
        fprintf(stderr, "rank %d: after the fork, element %zu is %g\n", r, i, b[i]);
        return 7;
      }
  }
  CHECK(hvd_barrier());
  printf("rank %d fork ok\n", r);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  CHECK(hvd_init());
  int r = hvd_rank(), n = hvd_size();
  size_t count = (1u << 20) + 3;
  float* a = malloc(count * sizeof(float));
  float* b = malloc(count * sizeof(float) * (n > 0 ? n : 1));
  if (!strcmp(argv[1], "check")) {
    for (size_t i = 0; i < count; ++i) a[i] = (float)(r + 1 + i % 3);
    CHECK(hvd_allreduce(a, b, count, HVD_FLOAT32, HVD_OP_SUM));
    CHECK(hvd_allreduce(a, a, count, HVD_FLOAT32, HVD_OP_MAX));
    for (size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int p = 0; p < n; ++p) sum += (float)(p + 1 + i % 3);
      if (b[i] != sum || a[i] != (float)(n + i % 3)) {
        fprintf(stderr, "rank %d: element %zu wrong\n", r, i);
        return 3;
      }
    }
    for (int root = 0; root < n; ++root) {
      for (size_t i = 0; i < count; ++i) a[i] = (r == root) ? (float)(root * 10 + i % 5) : -1.f;
      CHECK(hvd_broadcast(a, count, HVD_FLOAT32, root));
      for (size_t i = 0; i < count; ++i)
        if (a[i] != (float)(root * 10 + i % 5)) return 4;
    }
    for (size_t i = 0; i < count; ++i) a[i] = (float)r;
    CHECK(hvd_allgather(a, b, count, HVD_FLOAT32));
    for (int p = 0; p < n; ++p)
      if (b[(size_t)p * count] != (float)p || b[(size_t)p * count + count - 1] != (float)p) return 5;
    CHECK(hvd_barrier());
    printf("rank %d checked (%d shared segments)\n", r, shared_segments());
  } else if (!strcmp(argv[1], "die") || !strcmp(argv[1], "die-stay")) {
    if (!strcmp(argv[1], "die-stay")) signal(SIGTERM, SIG_IGN);
    size_t big = 16u << 20;
    float* x = calloc(big, sizeof(float));
    pthread_t t;
    if (r == 1) pthread_create(&t, NULL, killer, NULL);
    for (int it = 0; it < 100000; ++it) CHECK(hvd_allreduce(x, x, big, HVD_FLOAT32, HVD_OP_SUM));
    free(x);
  } else if (!strcmp(argv[1], "leave")) {
    if (r == 1) _exit(0);
    for (int it = 0; it < 100000; ++it) CHECK(hvd_allreduce(a, a, count, HVD_FLOAT32, HVD_OP_SUM));
  } else if (!strcmp(argv[1], "fork") && argc == 3) {
    int rc = fork_mode(argv[2], r, n, a, b, count);
    if (rc) return rc;
  } else if (!strcmp(argv[1], "mismatch")) {
    CHECK(hvd_allreduce(a, a, r == 1 ? 10 : 11, HVD_FLOAT32, HVD_OP_SUM));
  }
  free(a);
  free(b);
  hvd_shutdown();
  return 0;
}
