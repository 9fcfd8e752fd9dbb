#include "launcher/line_splitter.h"

namespace hvdrun {

std::string_view LineSplitter::feed(std::string_view data) {
  ready_.clear();
  size_t last = data.find_last_of("\n\r");
  if (last == std::string_view::npos) {
    partial_.append(data);
    if (partial_.size() >= kMaxLine) {
      ready_.swap(partial_);
      ready_.push_back('\n');
    }
    return ready_;
  }
  ready_.reserve(partial_.size() + last + 1);
  ready_.append(partial_);
  ready_.append(data.substr(0, last + 1));
  partial_.assign(data.substr(last + 1));
  return ready_;
}

std::string LineSplitter::flush() {
  if (partial_.empty()) return {};
  std::string out;
  out.swap(partial_);
  out.push_back('\n');
  return out;
}

}  // namespace hvdrun
