// LD_PRELOAD for launch_start_test.cc: logs the pid of every /proc/PID path (PID not the
// process itself) that the process opens or stats, one line per access, to the file named
// by HVDRUN_TEST_PROC_LOG. The test counts the accesses to processes that are not the job's.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int log_fd = -1;

__attribute__((constructor)) static void open_log(void) {
  const char* path = getenv("HVDRUN_TEST_PROC_LOG");
  if (path) log_fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
}

static void note(const char* path) {
  if (log_fd < 0 || !path || strncmp(path, "/proc/", 6) != 0) return;
  char* end = NULL;
  long pid = strtol(path + 6, &end, 10);
  if (end == path + 6 || (*end && *end != '/') || pid == (long)getpid()) return;
  char line[32];
  int n = snprintf(line, sizeof line, "%ld\n", pid);
  (void)!write(log_fd, line, (size_t)n);
}

#define NEXT(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

static mode_t mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

// open, open64 and openat: the mode is there only with O_CREAT or O_TMPFILE.
#define LOGGED_OPEN(name, params, args)     \
  int name params {                         \
    va_list ap;                             \
    va_start(ap, flags);                    \
    mode_t m = mode_arg(flags, ap);         \
    va_end(ap);                             \
    note(path);                             \
    return NEXT(name) args;                 \
  }
LOGGED_OPEN(open, (const char* path, int flags, ...), (path, flags, m))
LOGGED_OPEN(open64, (const char* path, int flags, ...), (path, flags, m))
LOGGED_OPEN(openat, (int dir, const char* path, int flags, ...), (dir, path, flags, m))
FILE* fopen(const char* path, const char* mode) {
  note(path);
  return NEXT(fopen)(path, mode);
}
FILE* fopen64(const char* path, const char* mode) {
  note(path);
  return NEXT(fopen64)(path, mode);
}
int stat(const char* path, struct stat* st) {
  note(path);
  return NEXT(stat)(path, st);
}
int stat64(const char* path, struct stat64* st) {
  note(path);
  return NEXT(stat64)(path, st);
}
int lstat(const char* path, struct stat* st) {
  note(path);
  return NEXT(lstat)(path, st);
}
#include <dirent.h>
DIR* opendir(const char* path) {
  note(path);
  return NEXT(opendir)(path);
}
