/* The README's demo: every rank contributes its rank + 1 to a 16 MiB float32 allreduce,
 * checks the reduced result, and rank 0 prints the answer and the bus bandwidth it saw.
 * Run: hvdrun -np 4 hvdrun-allreduce-demo */
#include <hvdrun/hvdrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void) {
  if (hvd_init() != 0) {
    fprintf(stderr, "hvd_init: %s\n", hvd_last_error());
    return 1;
  }
  int rank = hvd_rank(), size = hvd_size();
  size_t count = 4u << 20; /* 16 MiB of float32 */
  float* buf = malloc(count * sizeof(float));
  if (!buf) return 1;
  for (size_t i = 0; i < count; ++i) buf[i] = (float)(rank + 1);
  double t0 = now_s();
  int rc = hvd_allreduce(buf, buf, count, HVD_FLOAT32, HVD_OP_SUM);
  double dt = now_s() - t0;
  if (rc != 0) {
    fprintf(stderr, "rank %d: hvd_allreduce: %s\n", rank, hvd_last_error());
    return 1;
  }
  float expect = (float)size * (size + 1) / 2;
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += buf[i] != expect;
  if (wrong) {
    fprintf(stderr, "rank %d: %zu wrong elements (expected %g)\n", rank, wrong, expect);
    return 1;
  }
  printf("rank %d of %d on %s: allreduce checked\n", rank, size, getenv("HOROVOD_HOSTNAME") ? getenv("HOROVOD_HOSTNAME") : "?");
  hvd_barrier();
  if (rank == 0) {
    double busbw = count * sizeof(float) / dt / 1e9 * 2.0 * (size - 1) / size;
    printf("sum of (rank + 1) over %d ranks = %g on all %zu elements; busbw %.2f GB/s\n", size, expect, count, busbw);
  }
  free(buf);
  hvd_shutdown();
  return 0;
}
