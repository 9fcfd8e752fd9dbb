// Merging the ranks' timeline files (libhvdrun writes FILE.rank<N>, one JSON event per
// line) into the one Chrome trace hvdrun leaves at FILE. A rank killed mid-write leaves a
// last line cut short: lines that are not whole JSON objects are dropped.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace hvdrun {

// rank_files[r]: the text of rank r's file ("" when it has none). Returns the merged JSON
// array, and how many events it holds in *events.
std::string merge_timelines(const std::vector<std::string>& rank_files, size_t* events);

// Reads FILE.rank<r> for every rank, writes FILE (atomically: a temporary and rename), and
// removes the rank files. An error names the file.
Status merge_timeline_files(const std::string& file, int ranks);

}  // namespace hvdrun
