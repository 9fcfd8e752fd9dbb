// Expected errors as values: Result<T> holds either a value or an Error whose
// message carries its context ("rank 3: connect 10.0.0.2:4000: connection refused").
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace hvdrun {

struct Error {
  std::string message;
  int code = 1;  // an exit code or an hvd_* error code, depending on the layer
};

inline Error make_error(std::string message, int code = 1) { return Error{std::move(message), code}; }

// Prefixes context to an error travelling up: wrap(err, "rank 3") -> "rank 3: <msg>".
inline Error wrap(Error e, const std::string& context) {
  e.message = context + ": " + e.message;
  return e;
}

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { assert(!ok()); return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { assert(!ok_); return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace hvdrun
