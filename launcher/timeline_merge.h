// The job's timeline files. libhvdrun's ranks create FILE.rank<N> (O_EXCL: never over
// anything already there) and write one JSON event per line; hvdrun checks the paths before
// the job starts and merges the ranks' files into the one Chrome trace it leaves at FILE.
// A rank killed mid-write leaves a last line cut short: lines that are not whole JSON
// objects are dropped.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/result.h"

namespace hvdrun {

// rank_files[r]: the text of rank r's file ("" when it has none). Returns the merged JSON
// array, and how many events it holds in *events.
std::string merge_timelines(const std::vector<std::string>& rank_files, size_t* events);

// Before anything starts (kUsage, naming `origin`, the option or variable that gave FILE):
// FILE must be new or a regular file (it is replaced at the end), in an existing
// directory, and no FILE.rank<r> of the job's ranks may exist (an earlier job's files are
// neither overwritten nor merged, nor deleted).
Status check_timeline_path(const std::string& file, int ranks, const std::string& origin);

// The signal (SIGINT, SIGTERM, SIGHUP) pending on this blocked-signal process, taken; 0 if none.
int take_pending_interrupt();

// Merges the FILE.rank<r> this job's ranks wrote into FILE. Only regular files that begin
// as libhvdrun's do are read (opened O_NOFOLLOW|O_NONBLOCK: a link or a FIFO is named and
// left alone), each up to its size when opened; the output goes to a temporary file made
// next to FILE (mkstemp) and renamed over it. The merged rank files are then removed; on
// any failure they stay and the temporary is removed. `interrupted` is asked between
// chunks: a signal it returns stops the merge (kInterrupted, code 128+N). Errors:
// kOutputFailed naming the file (a full disk, a rank's file that is not its own: FILE is
// still written without it). No rank file at all: nothing is written.
Status merge_timeline_files(const std::string& file, int ranks,
                            const std::function<int()>& interrupted = take_pending_interrupt);

}  // namespace hvdrun
