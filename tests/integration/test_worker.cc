// A worker for the launcher's integration tests.
//   chatter BYTES        write BYTES of numbered, self-checking lines to stdout (and 1/8 to stderr)
//   family PIDFILE CODE  fork a child that sleeps; append "pid child" to PIDFILE; then exit CODE
//                        once every rank's line is there if CODE >= 0, else sleep forever
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

static unsigned checksum(const std::string& s) {
  unsigned h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

static long lines_in(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  long n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* rank = getenv("HOROVOD_RANK");
  std::string r = rank ? rank : "?";
  if (!strcmp(argv[1], "chatter") && argc == 3) {
    long long bytes = atoll(argv[2]), written = 0;
    std::string body;
    for (long long i = 0; written < bytes; ++i) {
      body = "rank=" + r + " seq=" + std::to_string(i) + " " + std::string(40 + i % 80, 'a' + i % 26);
      std::string line = body + " sum=" + std::to_string(checksum(body)) + "\n";
      FILE* f = i % 8 == 7 ? stderr : stdout;
      fwrite(line.data(), 1, line.size(), f);
      written += static_cast<long long>(line.size());
    }
    fflush(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "family") && argc == 4) {
    int code = atoi(argv[3]);
    pid_t child = fork();
    if (child == 0) {
      for (;;) pause();
    }
    FILE* f = fopen(argv[2], "a");
    fprintf(f, "%d %d\n", getpid(), child);
    fclose(f);
    printf("rank %s ready\n", r.c_str());
    fflush(stdout);
    if (code >= 0) {
      // Once every rank has written its pids (the test reads them all), at most 20 s.
      const char* size = getenv("HOROVOD_SIZE");
      const long ranks = size ? atol(size) : 1;
      for (int i = 0; i < 4000 && lines_in(argv[2]) < ranks; ++i) usleep(5000);
      return code;
    }
    for (;;) pause();
  }
  return 2;
}
