#include "launcher/timeline_merge.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace hvdrun {

std::string merge_timelines(const std::vector<std::string>& rank_files, size_t* events) {
  std::string out = "[\n";
  size_t n = 0;
  for (const auto& text : rank_files) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (line == "[" || line.empty()) continue;
      if (line.back() == ',') line.pop_back();
      if (line.empty() || line.front() != '{') continue;
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) continue;  // cut short by a kill
      out += n ? ",\n" : "";
      out += line;
      ++n;
    }
  }
  out += "\n]\n";
  if (events) *events = n;
  return out;
}

Status merge_timeline_files(const std::string& file, int ranks) {
  std::vector<std::string> texts;
  std::vector<std::string> found;
  for (int r = 0; r < ranks; ++r) {
    std::string p = file + ".rank" + std::to_string(r);
    std::ifstream f(p, std::ios::binary);
    if (!f) {
      texts.emplace_back();
      continue;
    }
    std::stringstream ss;
    ss << f.rdbuf();
    texts.push_back(ss.str());
    found.push_back(p);
  }
  if (found.empty()) return {};  // no rank wrote one (a job without libhvdrun)
  size_t events = 0;
  std::string merged = merge_timelines(texts, &events);
  std::string tmp = file + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (!o) return make_error("cannot write the timeline " + tmp + ": " + std::strerror(errno));
    o << merged;
    if (!o.flush()) return make_error("cannot write the timeline " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0)
    return make_error("cannot rename " + tmp + " to " + file + ": " + std::strerror(errno));
  for (auto& p : found) std::remove(p.c_str());
  return {};
}

}  // namespace hvdrun
