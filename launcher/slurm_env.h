// What a Slurm allocation says about itself (pure): Slurm's host lists (SLURM_JOB_NODELIST,
// as src/common/hostlist.c writes and reads them) and SLURM_TASKS_PER_NODE.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "launcher/hosts.h"

namespace hvdrun::slurm {

// "n[1-2,5],x[01-02],a[1-2]b[3-4]" -> n1 n2 n5 x01 x02 a1b3 a1b4 a2b3 a2b4, as
// `scontrol show hostnames` prints them: a range's width is its low bound's as written
// (zero padding kept), several brackets in one name expand leftmost slowest. Names are
// separated by commas (or spaces) outside brackets. At most `max_hosts` names.
Result<std::vector<std::string>> expand_hostlist(std::string_view list, size_t max_hosts = 1u << 20);

// "2(x3),1" -> 2 2 2 1.
Result<std::vector<int>> parse_tasks_per_node(std::string_view s);

// The allocation's hosts and slots from the launcher's environment: SLURM_JOB_NODELIST
// (else SLURM_NODELIST) and SLURM_TASKS_PER_NODE (one slot per node when unset).
// Errors name the variable and the bad value.
Result<std::vector<HostSlots>> allocation_hosts(const std::map<std::string, std::string>& env);

// SLURM_NTASKS (else SLURM_NPROCS) when set: -np's default inside an allocation; 0 otherwise.
Result<int> allocation_ntasks(const std::map<std::string, std::string>& env);

}  // namespace hvdrun::slurm
