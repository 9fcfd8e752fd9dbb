/* Multi-process collectives under hvdrun:
 *   coll_worker check   allreduce (1M+3, in place and not), broadcast from every root, allgather;
 *                       prints how many shared-memory segments this rank has mapped
 *   coll_worker die     rank 1 is SIGKILLed in the middle of a large allreduce loop
 *   coll_worker die-stay  the same, the others ignoring SIGTERM (so that they fail on their own)
 *   coll_worker mismatch  rank 1 calls with a different count
 *   coll_worker leave   rank 1 exits 0 without hvd_shutdown while the others allreduce */
#include <hvdrun/hvdrun.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char** argv) {
  if (argc != 2) return 2;
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
  } else if (!strcmp(argv[1], "mismatch")) {
    CHECK(hvd_allreduce(a, a, r == 1 ? 10 : 11, HVD_FLOAT32, HVD_OP_SUM));
  }
  free(a);
  free(b);
  hvd_shutdown();
  return 0;
}
