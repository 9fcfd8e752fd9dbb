#include "launcher/sys_files.h"

#include <dirent.h>

#include <algorithm>

namespace hvdrun {

std::vector<std::string> dir_entries(const std::string& path) {
  std::vector<std::string> out;
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace hvdrun
