/* A libhvdrun client for the rendezvous tests:
 *   init_worker             hvd_init, print the rank view, barrier, shutdown
 *   init_worker skip RANK   as above, except rank RANK never calls hvd_init (sleeps)
 *   init_worker twice       hvd_init twice, both must succeed */
#include <hvdrun/hvdrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "skip") == 0) {
    const char* r = getenv("HOROVOD_RANK");
    if (r && atoi(r) == atoi(argv[2])) {
      sleep(600);
      return 0;
    }
  }
  if (hvd_rank() != -1 || hvd_initialized()) {
    fprintf(stderr, "rank view before init\n");
    return 3;
  }
  int rc = hvd_init();
  if (rc != 0) {
    fprintf(stderr, "hvd_init failed (%d): %s\n", rc, hvd_last_error());
    return 10 + rc;
  }
  if (argc == 2 && strcmp(argv[1], "twice") == 0 && hvd_init() != 0) {
    fprintf(stderr, "second hvd_init failed: %s\n", hvd_last_error());
    return 4;
  }
  printf("rank=%d size=%d local_rank=%d local_size=%d cross_rank=%d cross_size=%d\n", hvd_rank(), hvd_size(),
         hvd_local_rank(), hvd_local_size(), hvd_cross_rank(), hvd_cross_size());
  for (int i = 0; i < 3; ++i) {
    rc = hvd_barrier();
    if (rc != 0) {
      fprintf(stderr, "hvd_barrier failed (%d): %s\n", rc, hvd_last_error());
      return 20 + rc;
    }
  }
  hvd_shutdown();
  return hvd_initialized() ? 5 : 0;
}
