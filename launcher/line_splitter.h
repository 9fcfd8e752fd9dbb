// Splits a byte stream into lines ended by '\n' or '\r' (progress bars), keeping each
// terminator, so that a worker's output can be tagged line by line.
#pragma once

#include <string>
#include <string_view>

namespace hvdrun {

class LineSplitter {
 public:
  // A line longer than this without a terminator is passed on in pieces of this size.
  static constexpr size_t kMaxLine = 1 << 20;

  // Appends `data`; returns the complete lines now available (each with its terminator),
  // concatenated. The view stays valid until the next call.
  std::string_view feed(std::string_view data);
  // At end of stream: the last partial line, with '\n' added, or "" when there is none.
  std::string flush();

 private:
  std::string partial_;
  std::string ready_;
};

// Calls fn(line) for each line of `lines` (each with its terminator).
template <class Fn>
void for_each_line(std::string_view lines, Fn&& fn) {
  size_t start = 0;
  while (start < lines.size()) {
    size_t end = lines.find_first_of("\n\r", start);
    end = end == std::string_view::npos ? lines.size() : end + 1;
    fn(lines.substr(start, end - start));
    start = end;
  }
}

}  // namespace hvdrun
