/* The launch benchmark's floor: fork/exec N copies of a command and wait for them all. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: spawn_baseline N command [args...]\n");
    return 2;
  }
  int n = atoi(argv[1]);
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      execvp(argv[2], argv + 2);
      _exit(127);
    }
    if (pid < 0) return 1;
  }
  int status, rc = 0;
  while (wait(&status) > 0)
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  return rc;
}
