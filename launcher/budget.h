// The descriptor and process budget of a job, checked before anything is spawned: a job
// that cannot fit under RLIMIT_NOFILE, RLIMIT_NPROC or the kernel's pid/thread limits is
// refused at once, naming the limit and the value needed (not after starting thousands of
// workers and running into EMFILE or EAGAIN). Pure check; read_process_budget() reads /proc
// and asks the kernel.
#pragma once

#include "common/result.h"

namespace hvdrun {

struct ProcessBudget {
  long long nofile = -1;         // RLIMIT_NOFILE soft limit (hvdrun raises it to the hard one); -1: unlimited
  long long nofile_in_use = 0;   // descriptors hvdrun has open now
  long long nproc = -1;          // RLIMIT_NPROC; -1: unlimited or not enforced (root)
  long long nproc_in_use = 0;    // tasks of this user now (read_process_budget: 0 unless they leave no room)
  long long pid_max = -1;        // min(kernel.pid_max, kernel.threads-max); -1: unknown
  long long tasks_in_use = 0;    // tasks on the system now
};

struct BudgetNeed {
  long long local_ranks = 0;   // workers spawned by this hvdrun
  long long all_ranks = 0;     // every rank (each holds a rendezvous connection to hvdrun)
  long long remote_hosts = 0;  // SSH sessions and their threads
};

// Descriptors hvdrun needs: two pipes per local worker, one rendezvous connection per rank,
// a few per remote host, and a margin for itself.
long long files_needed(const BudgetNeed& need);
// Processes (tasks) this job adds on this machine: one per local worker, its own threads.
long long tasks_needed(const BudgetNeed& need);

Status check_process_budget(const ProcessBudget& have, const BudgetNeed& need);
// This machine's limits and use. `tasks` (tasks_needed()): the room asked of RLIMIT_NPROC,
// which the kernel's own count answers (no scan of the host's processes).
ProcessBudget read_process_budget(long long tasks);

}  // namespace hvdrun
