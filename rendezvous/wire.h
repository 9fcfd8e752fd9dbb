// Bounds-checked little-endian encoding for rendezvous messages. A Reader never reads past
// its input: garbage gives an error, never a crash.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace hvdrun::rdv {

class Writer {
 public:
  void u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { raw(&v, 4); }
  void i32(int32_t v) { raw(&v, 4); }
  void i64(int64_t v) { raw(&v, 8); }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    buf_.append(s);
  }
  void raw(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  std::string take() { return std::move(buf_); }
  const std::string& data() const { return buf_; }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool u8(uint8_t& v) { return raw(&v, 1); }
  bool u32(uint32_t& v) { return raw(&v, 4); }
  bool i32(int32_t& v) { return raw(&v, 4); }
  bool i64(int64_t& v) { return raw(&v, 8); }
  bool str(std::string& s, size_t max = 1 << 24) {
    uint32_t n;
    if (!u32(n) || n > max || n > in_.size()) return false;
    s.assign(in_.substr(0, n));
    in_.remove_prefix(n);
    return true;
  }
  bool raw(void* p, size_t n) {
    if (in_.size() < n) return false;
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

}  // namespace hvdrun::rdv
