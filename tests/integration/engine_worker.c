/* The engine's C API across real processes under hvdrun:
 *   engine_worker async      names submitted in a per-rank shuffled order (mixed dtypes and
 *                            ops, grouped, scales), allgatherv, alltoall with splits,
 *                            reducescatter, their blocking wrappers, poll; then join with
 *                            uneven data ("rank R engine ok")
 *   engine_worker reinit     hvd_init, allreduce, hvd_shutdown three times ("rank R reinit ok")
 *   engine_worker stall      rank 1 submits "late.tensor" 2.5 s after the others
 *   engine_worker stallforever  rank 1 never submits "late.tensor"
 *   engine_worker die        rank 1 is SIGKILLed while the others have handles pending
 *   engine_worker fewer [late]  rank 1 submits one allreduce fewer ("f2"), calls hvd_shutdown
 *                               (late: the others submit "f2" 1 s later, after it left)
 *                            and exits 0; the others' "f2" fails and they exit 1
 *   engine_worker overflow   every entry point with counts whose bytes wrap or pass the
 *                            address space, splits whose sum wraps, and partly overlapping
 *                            send/recv buffers: each refused (HVD_ERR_INVALID_ARGUMENT,
 *                            naming the value); then in-place calls still work ("rank R
 *                            overflow ok")
 *   engine_worker threads    4 threads of blocking allreduces, broadcasts and allgathers at
 *                            once, every value checked ("rank R threads ok")
 *   engine_worker steps N    N steps of 20 async allreduces (for the timeline; with
 *                            ENGINE_WORKER_STEPPING=PREFIX, PREFIX<rank> appears after the first) */
#include <hvdrun/hvdrun.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                                  \
  do {                                                                                               \
    int rc_ = (call);                                                                                \
    if (rc_ != 0) {                                                                                  \
      fprintf(stderr, "rank %d: %s failed (%d): %s\n", hvd_rank(), #call, rc_, hvd_last_error());     \
      return 10 + rc_;                                                                               \
    }                                                                                                \
  } while (0)
#define EXPECT(cond, ...)                                    \
  do {                                                       \
    if (!(cond)) {                                           \
      fprintf(stderr, "rank %d: ", hvd_rank());              \
      fprintf(stderr, __VA_ARGS__);                          \
      fprintf(stderr, "\n");                                 \
      return 3;                                              \
    }                                                        \
  } while (0)

static unsigned lcg(unsigned* s) { return *s = *s * 1103515245u + 12345u; }

static int async_mode(void) {
  int r = hvd_rank(), n = hvd_size();
  enum { T = 24 };
  float* in[T];
  float* out[T];
  size_t cnt[T];
  int order[T];
  hvd_handle_t h[T];
  for (int i = 0; i < T; ++i) {
    cnt[i] = 1 + (size_t)(i * 97 % 5000);
    in[i] = malloc(cnt[i] * sizeof(float));
    out[i] = malloc(cnt[i] * sizeof(float));
    for (size_t k = 0; k < cnt[i]; ++k) in[i][k] = (float)(r + 1) * (float)(1 + k % 3);
    order[i] = i;
  }
  unsigned seed = 17u + (unsigned)r * 7919u;
  for (int step = 0; step < 3; ++step) {
    for (int i = T - 1; i > 0; --i) {
      int j = (int)(lcg(&seed) % (unsigned)(i + 1)), t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    for (int k = 0; k < T; ++k) {
      int i = order[k];
      char name[32];
      snprintf(name, sizeof name, "grad.%d", i);
      /* average, prescale 2, postscale 0.5: the average itself */
      CHECK(hvd_allreduce_async(name, in[i], out[i], cnt[i], HVD_FLOAT32, i % 2 ? HVD_OP_AVERAGE : HVD_OP_SUM,
                                i % 2 ? 2.0 : 1.0, i % 2 ? 0.5 : 1.0, &h[i]));
    }
    for (int i = 0; i < T; ++i) {
      while (hvd_poll(h[i]) == 0) usleep(100);
      EXPECT(hvd_poll(h[i]) == 1, "poll of a finished handle");
      CHECK(hvd_wait(h[i]));
      EXPECT(hvd_poll(h[i]) == -1, "poll of a released handle is %d", hvd_poll(h[i]));
      double sum = 0;
      for (int p = 0; p < n; ++p) sum += (p + 1);
      for (size_t k = 0; k < cnt[i]; k += 101) {
        double expect = sum * (1 + k % 3) / (i % 2 ? n : 1);
        EXPECT(out[i][k] > expect - 1e-3 && out[i][k] < expect + 1e-3, "grad.%d[%zu] = %f, expected %f", i, k,
               out[i][k], expect);
      }
    }
  }
  /* grouped */
  {
    double a[3] = {r, r, r}, b[5] = {1, 1, 1, 1, 1}, ao[3], bo[5];
    const void* s[2] = {a, b};
    void* d[2] = {ao, bo};
    size_t c[2] = {3, 5};
    hvd_handle_t g;
    CHECK(hvd_grouped_allreduce_async("group", 2, s, d, c, HVD_FLOAT64, HVD_OP_SUM, 1.0, 1.0, &g));
    CHECK(hvd_wait(g));
    EXPECT(ao[2] == n * (n - 1) / 2.0 && bo[4] == n, "grouped allreduce");
    CHECK(hvd_grouped_allreduce(2, s, d, c, HVD_FLOAT64, HVD_OP_MAX));
    EXPECT(ao[0] == n - 1 && bo[0] == 1, "blocking grouped allreduce");
  }
  /* allgatherv: rank p sends p + 1 rows of 2 */
  {
    int32_t mine[64];
    for (int i = 0; i < 2 * (r + 1); ++i) mine[i] = 100 * r + i / 2;
    hvd_handle_t g;
    CHECK(hvd_allgatherv_async("ag", mine, (size_t)r + 1, 2, HVD_INT32, &g));
    size_t rows[64];
    CHECK(hvd_result_rows(g, rows));
    size_t total = 0;
    for (int p = 0; p < n; ++p) {
      EXPECT(rows[p] == (size_t)p + 1, "allgatherv rows[%d] = %zu", p, rows[p]);
      total += rows[p];
    }
    int32_t* all = malloc(total * 2 * sizeof(int32_t));
    CHECK(hvd_wait_result(g, all));
    size_t at = 0;
    for (int p = 0; p < n; ++p)
      for (int row = 0; row <= p; ++row, ++at) EXPECT(all[at * 2 + 1] == 100 * p + row, "allgatherv data");
    free(all);
    void* out2 = NULL;
    size_t rows2[64];
    CHECK(hvd_allgatherv(mine, (size_t)r + 1, 2, HVD_INT32, &out2, rows2));
    EXPECT(rows2[n - 1] == (size_t)n && ((int32_t*)out2)[0] == 0, "blocking allgatherv");
    hvd_free(out2);
  }
  /* alltoall: rank r sends (d + r) % 3 + 1 rows of 1 to d, value 1000 r + d */
  {
    size_t splits[64], rows = 0;
    for (int d = 0; d < n; ++d) rows += splits[d] = (size_t)((d + r) % 3 + 1);
    int64_t* send = malloc(rows * sizeof(int64_t));
    size_t k = 0;
    for (int d = 0; d < n; ++d)
      for (size_t i = 0; i < splits[d]; ++i) send[k++] = 1000 * r + d;
    void* got = NULL;
    size_t rows_from[64];
    CHECK(hvd_alltoall(send, rows, 1, splits, HVD_INT64, &got, rows_from));
    k = 0;
    for (int p = 0; p < n; ++p) {
      EXPECT(rows_from[p] == (size_t)((r + p) % 3 + 1), "alltoall rows from %d", p);
      for (size_t i = 0; i < rows_from[p]; ++i, ++k) EXPECT(((int64_t*)got)[k] == 1000 * p + r, "alltoall data");
    }
    hvd_free(got);
    /* equal splits without a splits array, rows not divisible: a clear error at once */
    hvd_handle_t bad;
    /* (one rank: every row count divides, so there is nothing uneven to refuse) */
    if (n > 1)
      EXPECT(hvd_alltoall_async("a2a.bad", send, (size_t)n + 1, 1, NULL, HVD_INT64, &bad) == HVD_ERR_INVALID_ARGUMENT,
             "uneven equal-split alltoall accepted");
    free(send);
  }
  /* reducescatter: 5 rows of 3 */
  {
    float x[15], y[15];
    for (int i = 0; i < 15; ++i) x[i] = (float)(i + r);
    CHECK(hvd_reducescatter(x, y, 5, 3, HVD_FLOAT32, HVD_OP_SUM));
    size_t first = 0;
    for (int p = 0; p < r; ++p) first += 5 / n + ((size_t)p < 5 % (size_t)n ? 1 : 0);
    size_t mine = 5 / n + ((size_t)r < 5 % (size_t)n ? 1 : 0);
    for (size_t i = 0; i < mine * 3; ++i) {
      float expect = 0;
      for (int p = 0; p < n; ++p) expect += (float)(first * 3 + i + p);
      EXPECT(y[i] == expect, "reducescatter element %zu: %f != %f", i, y[i], expect);
    }
  }
  /* a grouped allreduce of several dtypes; then one whose mix differs on rank 1 (n > 1):
   * HVD_ERR_MISMATCH on every rank, naming the dtypes */
  {
    float f[3] = {1, 2, 3}, fo[3];
    double d[2] = {(double)r, 0.5}, dout[2];
    const void* sends[2] = {f, d};
    void* recvs[2] = {fo, dout};
    size_t counts[2] = {3, 2};
    hvd_dtype_t dts[2] = {HVD_FLOAT32, HVD_FLOAT64};
    hvd_handle_t h;
    CHECK(hvd_grouped_allreduce_dtypes_async("mixed.dtypes", 2, sends, recvs, counts, dts, HVD_OP_SUM, 1, 1, &h));
    CHECK(hvd_wait(h));
    EXPECT(fo[2] == 3.f * (float)n && dout[0] == (double)(n * (n - 1) / 2) && dout[1] == 0.5 * n,
           "mixed dtypes gave %f %f %f", fo[2], dout[0], dout[1]);
    if (n > 1) {
      hvd_dtype_t other[2] = {HVD_FLOAT32, r == 1 ? HVD_FLOAT32 : HVD_FLOAT64};
      double d3[3] = {0, 0, 0};
      if (r == 1) sends[1] = recvs[1] = d3;
      CHECK(hvd_grouped_allreduce_dtypes_async("mixed.mismatch", 2, sends, recvs, counts, other, HVD_OP_SUM, 1, 1, &h));
      EXPECT(hvd_wait(h) == HVD_ERR_MISMATCH, "mixed dtypes differing on rank 1 ran");
      EXPECT(strstr(hvd_last_error(), "'mixed.mismatch': mismatched dtype: float32,float64 on rank") != NULL &&
                 strstr(hvd_last_error(), "float32 (every tensor) on rank 1") != NULL,
             "mixed mismatch: %s", hvd_last_error());
    }
  }
  /* duplicate pending name: rank 0 resubmits "dup" while it is surely pending (the other
   * ranks submit it only after rank 0's "dup.checked" broadcast, which the engine runs while
   * "dup" waits); otherwise "dup" could finish between the two submissions, and a name is a
   * duplicate only while it is pending, as in Horovod. A job of one finishes "dup" as soon
   * as the engine's thread sees it: there the check is left to the engine's unit tests. */
  {
    float a = 1, b;
    int checked = 0;
    hvd_handle_t h1, h2;
    if (r == 0 && n > 1) {
      CHECK(hvd_allreduce_async("dup", &a, &b, 1, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h1));
      EXPECT(hvd_allreduce_async("dup", &a, &b, 1, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h2) == HVD_ERR_INVALID_ARGUMENT,
             "duplicate name accepted");
      EXPECT(strstr(hvd_last_error(), "'dup'") != NULL, "duplicate error: %s", hvd_last_error());
    }
    if (r == 0) checked = 1;
    hvd_handle_t hb;
    CHECK(hvd_broadcast_async("dup.checked", &checked, 1, HVD_INT32, 0, &hb));
    CHECK(hvd_wait(hb));
    EXPECT(checked == 1, "dup.checked broadcast gave %d", checked);
    if (r != 0 || n == 1) CHECK(hvd_allreduce_async("dup", &a, &b, 1, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h1));
    CHECK(hvd_wait(h1));
    EXPECT(b == (float)n, "dup allreduce gave %f, expected %d", b, n);
    /* Every rank reaches rank 0's decision: the other ranks' second "dup" pairs with rank
     * 0's refused one and fails too, naming rank 0. */
    if (r != 0) {
      CHECK(hvd_allreduce_async("dup", &a, &b, 1, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h2));
      EXPECT(hvd_wait(h2) == HVD_ERR_INVALID_ARGUMENT, "the second dup ran");
      EXPECT(strstr(hvd_last_error(), "'dup': refused on rank 0") != NULL, "second dup: %s", hvd_last_error());
    }
  }
  /* join with uneven data: rank r has r + 1 batches */
  for (int b = 0; b <= r; ++b) {
    float v = (float)(r + 1), s;
    hvd_handle_t j;
    CHECK(hvd_allreduce_async("batch", &v, &s, 1, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &j));
    CHECK(hvd_wait(j));
    float expect = 0;
    for (int p = b; p < n; ++p) expect += (float)(p + 1);
    EXPECT(s == expect, "batch %d: %f != %f", b, s, expect);
  }
  int last = -1;
  CHECK(hvd_join(&last));
  EXPECT(last == n - 1, "last joined rank %d", last);
  for (int i = 0; i < T; ++i) {
    free(in[i]);
    free(out[i]);
  }
  printf("rank %d engine ok\n", r);
  return 0;
}

/* A call that must be refused at once, its message naming `value`. */
#define REFUSED(call, value)                                                                            \
  do {                                                                                                  \
    int rc_ = (call);                                                                                   \
    if (rc_ != HVD_ERR_INVALID_ARGUMENT || !strstr(hvd_last_error(), value)) {                          \
      fprintf(stderr, "rank %d: %s returned %d, not HVD_ERR_INVALID_ARGUMENT naming %s: %s\n", hvd_rank(), \
              #call, rc_, value, hvd_last_error());                                                     \
      return 3;                                                                                         \
    }                                                                                                   \
  } while (0)

static int overflow_mode(void) {
  int r = hvd_rank(), n = hvd_size();
  enum { kN = 1 << 20 };
  float* x = calloc(kN + 64, sizeof(float));
  float* y = calloc((size_t)kN * (size_t)n + 64, sizeof(float));
  if (!x || !y) return 3;
  const size_t wrap = (size_t)1 << 62; /* float32: 2^64 bytes, wraps to 0 */
  const size_t huge = (size_t)1 << 60; /* float32: 2^62 bytes, more than any address space */
  const char* wrap_s = "4611686018427387904";
  const char* huge_s = "1152921504606846976";
  size_t rows[64], splits[64] = {0}, counts[3] = {8, wrap, 8};
  const void* sends[3] = {x, x + 16, x + 32};
  void* recvs[3] = {y, y + 16, y + 32};
  void* out = NULL;
  hvd_handle_t h = 0;
  /* counts whose bytes wrap, or do not fit below the top of the address space */
  REFUSED(hvd_allreduce(x, y, wrap, HVD_FLOAT32, HVD_OP_SUM), wrap_s);
  REFUSED(hvd_allreduce(x, y, SIZE_MAX, HVD_INT8, HVD_OP_SUM), "18446744073709551615");
  REFUSED(hvd_allreduce(x, x, huge, HVD_FLOAT32, HVD_OP_SUM), huge_s);
  REFUSED(hvd_allreduce_async("ovf", x, y, wrap, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h), wrap_s);
  REFUSED(hvd_broadcast(x, wrap, HVD_FLOAT32, 0), wrap_s);
  REFUSED(hvd_broadcast(x, huge, HVD_INT64, 0), huge_s);
  REFUSED(hvd_broadcast_async("ovf", x, wrap, HVD_FLOAT32, 0, &h), wrap_s);
  REFUSED(hvd_allgather(x, y, wrap, HVD_FLOAT32), wrap_s);
  REFUSED(hvd_allgather(x, y, huge, HVD_INT8), huge_s); /* recvbuf: size() x 2^60 bytes */
  REFUSED(hvd_grouped_allreduce_async("ovf", 3, sends, recvs, counts, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h), wrap_s);
  {
    /* each fits, not all three together */
    size_t third[3] = {(size_t)1 << 55, (size_t)1 << 55, (size_t)1 << 55};
    REFUSED(hvd_grouped_allreduce(3, sends, recvs, third, HVD_INT8, HVD_OP_SUM), "add up");
    /* sendbuf fits, not size() blocks of it in recvbuf */
    if (n > 1) REFUSED(hvd_allgather(x, y, third[0], HVD_INT8), "36028797018963968");
  }
  REFUSED(hvd_grouped_allreduce(3, sends, recvs, counts, HVD_FLOAT32, HVD_OP_SUM), wrap_s);
  REFUSED(hvd_allgatherv_async("ovf", x, wrap, 1, HVD_FLOAT32, &h), wrap_s);
  REFUSED(hvd_allgatherv_async("ovf", x, 1, wrap, HVD_FLOAT32, &h), wrap_s);
  REFUSED(hvd_allgatherv(x, huge, 1, HVD_FLOAT32, &out, rows), huge_s);
  REFUSED(hvd_reducescatter_async("ovf", x, y, huge, 1, HVD_FLOAT32, HVD_OP_SUM, &h), huge_s);
  REFUSED(hvd_reducescatter(x, y, 4, wrap, HVD_FLOAT32, HVD_OP_SUM), wrap_s);
  splits[0] = huge; /* all of it to rank 0 */
  REFUSED(hvd_alltoall_async("ovf", x, huge, 1, splits, HVD_FLOAT32, &h), huge_s);
  /* splits whose sum wraps around to `rows` */
  if (n > 1) {
    splits[0] = splits[1] = (size_t)1 << 63;
    REFUSED(hvd_alltoall_async("ovf", x, 0, 1, splits, HVD_FLOAT32, &h), "9223372036854775808");
    REFUSED(hvd_alltoall(x, 0, 1, splits, HVD_FLOAT32, &out, rows), "9223372036854775808");
  }
  /* partly overlapping send and receive buffers (exactly equal is in place) */
  REFUSED(hvd_allreduce(x, x + 1, kN, HVD_FLOAT32, HVD_OP_SUM), "overlap");
  REFUSED(hvd_allreduce_async("ovl", x + 1, x, kN, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h), "overlap");
  {
    size_t c3[3] = {16, 16, 16};
    void* shifted[3] = {x + 16, y + 16, y + 32}; /* tensor 0's result lands on tensor 1's input */
    REFUSED(hvd_grouped_allreduce(3, sends, shifted, c3, HVD_FLOAT32, HVD_OP_SUM), "overlap");
    void* crossed[3] = {y, y + 8, y + 32}; /* two results on one another */
    REFUSED(hvd_grouped_allreduce_async("ovl", 3, sends, crossed, c3, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h), "overlap");
  }
  REFUSED(hvd_allgather(y + 1, y, kN, HVD_FLOAT32), "overlap");
  REFUSED(hvd_reducescatter(x, x + 1, (size_t)n * 4, 1, HVD_FLOAT32, HVD_OP_SUM), "overlap");
  /* nothing was submitted: in place and own-slot calls run and are right */
  for (int i = 0; i < kN; ++i) x[i] = (float)(r + 1 + i % 3);
  CHECK(hvd_allreduce(x, x, kN, HVD_FLOAT32, HVD_OP_SUM));
  for (int i = 0; i < kN; ++i)
    EXPECT(x[i] == (float)(n * (n + 1) / 2 + n * (i % 3)), "in-place allreduce element %d is %g", i, x[i]);
  for (int i = 0; i < 8; ++i) y[(size_t)r * 8 + i] = (float)(10 * r + i);
  CHECK(hvd_allgather(y + (size_t)r * 8, y, 8, HVD_FLOAT32));
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < 8; ++i) EXPECT(y[p * 8 + i] == (float)(10 * p + i), "allgather in its own slot");
  free(x);
  free(y);
  printf("rank %d overflow ok\n", r);
  return 0;
}

/* Blocking calls from several threads: each of a kind pairs with the call of the same
 * order on the other ranks, whichever thread made it, so every thread sends the same
 * values (any pairing has one right answer). */
enum { kThreadCalls = 150, kThreadElems = 64 };
static void* blocking_thread(void* arg) {
  int r = hvd_rank(), n = hvd_size();
  char* err = arg;
  for (int k = 0; k < kThreadCalls && !err[0]; ++k) {
    float v[kThreadElems], s[kThreadElems];
    int rc;
    if (k % 3 == 0) {
      for (int i = 0; i < kThreadElems; ++i) v[i] = (float)(r + 1);
      rc = hvd_allreduce(v, s, kThreadElems, HVD_FLOAT32, HVD_OP_SUM);
      if (!rc && s[kThreadElems - 1] != (float)(n * (n + 1) / 2))
        snprintf(err, 512, "allreduce %d gave %f, expected %d", k, s[kThreadElems - 1], n * (n + 1) / 2);
    } else if (k % 3 == 1) {
      for (int i = 0; i < kThreadElems; ++i) v[i] = r == 0 ? 42.f : -1.f;
      rc = hvd_broadcast(v, kThreadElems, HVD_FLOAT32, 0);
      if (!rc && v[kThreadElems - 1] != 42.f) snprintf(err, 512, "broadcast %d gave %f", k, v[kThreadElems - 1]);
    } else {
      int mine[2] = {r, r}, all[64];
      rc = n <= 32 ? hvd_allgather(mine, all, 2, HVD_INT32) : 0;
      for (int p = 0; !rc && p < n && p < 32; ++p)
        if (all[2 * p] != p || all[2 * p + 1] != p) {
          snprintf(err, 512, "allgather %d gave %d at rank %d's place", k, all[2 * p], p);
          break;
        }
    }
    if (rc) snprintf(err, 512, "call %d failed (%d): %s", k, rc, hvd_last_error());
  }
  return NULL;
}

static int threads_mode(void) {
  enum { T = 4 };
  pthread_t t[T];
  static char err[T][512];
  for (int i = 0; i < T; ++i) EXPECT(pthread_create(&t[i], NULL, blocking_thread, err[i]) == 0, "pthread_create");
  for (int i = 0; i < T; ++i) pthread_join(t[i], NULL);
  for (int i = 0; i < T; ++i) EXPECT(!err[i][0], "thread %d: %s", i, err[i]);
  printf("rank %d threads ok\n", hvd_rank());
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "reinit")) {
    for (int round = 0; round < 3; ++round) {
      CHECK(hvd_init());
      int r = hvd_rank(), n = hvd_size();
      float v = (float)(r + round), s;
      CHECK(hvd_allreduce(&v, &s, 1, HVD_FLOAT32, HVD_OP_SUM));
      float expect = (float)(n * (n - 1) / 2 + n * round);
      EXPECT(s == expect, "round %d: %f != %f", round, s, expect);
      CHECK(hvd_shutdown());
      EXPECT(hvd_rank() == -1, "rank after shutdown");
    }
    CHECK(hvd_init());
    printf("rank %d reinit ok\n", hvd_rank());
    CHECK(hvd_shutdown());
    return 0;
  }
  CHECK(hvd_init());
  EXPECT(hvd_version()[0] != '\0' && hvd_nccl_built() >= 0 && hvd_cuda_built() >= 0, "build info");
  int r = hvd_rank(), rc = 0;
  if (!strcmp(argv[1], "async")) {
    rc = async_mode();
  } else if (!strcmp(argv[1], "overflow")) {
    rc = overflow_mode();
  } else if (!strcmp(argv[1], "threads")) {
    rc = threads_mode();
  } else if (!strcmp(argv[1], "stall") || !strcmp(argv[1], "stallforever")) {
    float v = 1, s;
    hvd_handle_t h;
    if (r == 1) {
      if (!strcmp(argv[1], "stallforever")) pause();
      usleep(2500 * 1000);
    }
    CHECK(hvd_allreduce_async("late.tensor", &v, &s, 1, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h));
    CHECK(hvd_wait(h));
    printf("rank %d done\n", r);
  } else if (!strcmp(argv[1], "die")) {
    float v[1000], s[1000];
    hvd_handle_t h[8];
    for (int i = 0; i < 8 && r != 1; ++i) {
      char name[16];
      snprintf(name, sizeof name, "p%d", i);
      CHECK(hvd_allreduce_async(name, v, s, 1000, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h[i]));
    }
    if (r == 1) {
      usleep(300 * 1000);
      raise(SIGKILL);
    }
    int failed = 0;
    for (int i = 0; i < 8; ++i)
      if (hvd_wait(h[i]) == HVD_ERR_PEER) ++failed;
    fprintf(stderr, "rank %d: %d pending handles failed: %s\n", r, failed, hvd_last_error());
    return failed == 8 ? 5 : 4;
  } else if (!strcmp(argv[1], "fewer")) {
    for (int i = 0; i < (r == 1 ? 2 : 3); ++i) {
      char name[16];
      float v = 1, s;
      hvd_handle_t h;
      snprintf(name, sizeof name, "f%d", i);
      if (i == 2 && argc > 2 && !strcmp(argv[2], "late")) sleep(1);  // rank 1 has left by then
      CHECK(hvd_allreduce_async(name, &v, &s, 1, HVD_FLOAT32, HVD_OP_SUM, 1, 1, &h));
      CHECK(hvd_wait(h));
    }
    printf("rank %d fewer done\n", r);
  } else if (!strcmp(argv[1], "steps")) {
    int steps = argc > 2 ? atoi(argv[2]) : 3;
    /* 80 KB a tensor: above what travels with the negotiation (64 KiB), below the fusion
       buffer's per-tensor bound (256 KiB), so every step fuses (the timeline shows it). */
    enum { kElems = 20000 };
    float* buf = calloc(20 * kElems, sizeof(float));
    float* out = calloc(20 * kElems, sizeof(float));
    if (!buf || !out) return 3;
    for (int st = 0; st < steps; ++st) {
      hvd_handle_t h[20];
      for (int i = 19; i >= 0; --i) {
        char name[16];
        snprintf(name, sizeof name, "layer%d", i);
        CHECK(hvd_allreduce_async(name, buf + (size_t)i * kElems, out + (size_t)i * kElems, kElems, HVD_FLOAT32,
                                  HVD_OP_AVERAGE, 1, 1, &h[i]));
      }
      for (int i = 0; i < 20; ++i) CHECK(hvd_wait(h[i]));
      if (argc > 3 && r == 1 && st == atoi(argv[3])) raise(SIGKILL);
      /* ENGINE_WORKER_STEPPING=PREFIX: PREFIX<rank> is created once the first step is done
         (a test that stops a rank "in the middle of its steps" waits for it). */
      const char* mark = getenv("ENGINE_WORKER_STEPPING");
      if (st == 0 && mark) {
        char path[4096];
        snprintf(path, sizeof path, "%s%d", mark, r);
        FILE* f = fopen(path, "w");
        if (f) fclose(f);
      }
    }
    printf("rank %d steps done\n", r);
    free(buf);
    free(out);
  }
  hvd_shutdown();
  return rc;
}
