// Rate limit for repeated log lines: the first line of a kind is written, the same kind
// again within `window` is only counted, and the count comes out as one line
// ("N more like this: KIND") when the window has passed (at the next line of that kind or
// at flush()). A storm of 22,000 refused connections is two lines, not 22,000. Pure:
// the caller passes the time and writes the lines it is given.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>

namespace hvdrun {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  using Emit = std::function<void(const std::string& line)>;

  explicit LogLimiter(Clock::duration window = std::chrono::seconds(5)) : window_(window) {}

  // `kind` groups lines that are "like this" (the message without its peer address, say);
  // `line` is the full line. Returns true when `line` was emitted.
  bool log(const std::string& kind_in, const std::string& line, Clock::time_point now, const Emit& emit) {
    // Kinds are few; a flood of distinct ones shares one entry (memory stays bounded).
    const std::string& kind = kinds_.size() < kMaxKinds || kinds_.count(kind_in) ? kind_in : kOther;
    auto [it, fresh] = kinds_.try_emplace(kind);
    Entry& e = it->second;
    if (!fresh && now - e.since < window_) {
      ++e.suppressed;
      return false;
    }
    if (e.suppressed) emit(summary(kind, e.suppressed));
    e.suppressed = 0;
    e.since = now;
    emit(line);
    return true;
  }

  // Emits the counts of every kind whose window has passed (all of them with force).
  void flush(Clock::time_point now, const Emit& emit, bool force = false) {
    for (auto it = kinds_.begin(); it != kinds_.end();) {
      Entry& e = it->second;
      if (!force && now - e.since < window_) {
        ++it;
        continue;
      }
      if (e.suppressed) emit(summary(it->first, e.suppressed));
      it = kinds_.erase(it);
    }
  }

  static std::string summary(const std::string& kind, unsigned long long n) {
    return std::to_string(n) + " more like this: " + kind;
  }

 private:
  static constexpr size_t kMaxKinds = 64;
  inline static const std::string kOther = "other lines";
  struct Entry {
    Clock::time_point since{};
    unsigned long long suppressed = 0;
  };
  Clock::duration window_;
  std::map<std::string, Entry> kinds_;
};

}  // namespace hvdrun
