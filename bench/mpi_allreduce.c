/* Open MPI's MPI_Allreduce, float32 sum, timed like hvdrun-bench: prints "bytes busbw_GBps us".
 * Both buffers are written before timing, as hvdrun-bench's are (a calloc'd buffer never
 * written maps the shared zero page, which flatters whoever reads it). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t min = argc > 1 ? strtoull(argv[1], 0, 10) : 4096, max = argc > 2 ? strtoull(argv[2], 0, 10) : (256u << 20);
  for (size_t bytes = min; bytes <= max; bytes *= 4) {
    size_t count = bytes / 4;
    float* a = calloc(count, 4);
    float* b = calloc(count, 4);
    for (size_t i = 0; i < count; ++i) {
      a[i] = (float)((rank + 1) * ((i % 7) + 1));
      b[i] = 0.f;
    }
    /* as hvdrun-bench -n auto; on this VM a new buffer of 16 MiB runs some 1.5x slower for
       its first 100 ms (in both tools): 20 warm-ups there, not 5 */
    int iters = bytes >= (64u << 20) ? 5 : bytes >= (1u << 20) ? 20 : 200;
    for (int i = 0; i < iters; ++i) MPI_Allreduce(a, b, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* warm-up */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(a, b, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / iters, tmax;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("%zu %.4f %.1f\n", bytes, bytes / tmax / 1e9 * 2.0 * (n - 1) / n, tmax * 1e6);
    free(a);
    free(b);
  }
  MPI_Finalize();
  return 0;
}
