// Status and Result<T>: how the library reports bad input, with the exact context and a hint.
//
//   Result<int64_t> r = parse_batch("0");
//   if (!r.ok()) return r.status();       // "batch must be at least 1" + hint
//   int64_t batch = *r;
//
// No exception crosses the library API. The CLI maps a failed Status to exit code 2.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "base/check.h"

namespace trainfit {

enum class ErrorCode {
  kInvalidArgument,  // a value the user gave cannot be used (impossible shape, bad key)
  kNotFound,         // an unknown name (model, GPU, op, --set key)
  kOutOfRange,       // a size overflows int64 or exceeds a limit
  kParseError,       // a malformed file or value
  kUnsupported,      // valid, but not modelled by trainfit
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(ErrorCode code, std::string message, std::string hint = {})
      : ok_(false), code_(code), message_(std::move(message)), hint_(std::move(hint)) {}

  bool ok() const { return ok_; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }

  // "message (hint: hint)" in one line.
  std::string to_string() const;

  // Prefixes the message with where the error happened ("resnet50: ...").
  Status with_context(const std::string& context) const;

 private:
  bool ok_ = true;
  ErrorCode code_ = ErrorCode::kInvalidArgument;
  std::string message_;
  std::string hint_;
};

inline Status invalid_argument(std::string message, std::string hint = {}) {
  return {ErrorCode::kInvalidArgument, std::move(message), std::move(hint)};
}
inline Status not_found(std::string message, std::string hint = {}) {
  return {ErrorCode::kNotFound, std::move(message), std::move(hint)};
}
inline Status out_of_range(std::string message, std::string hint = {}) {
  return {ErrorCode::kOutOfRange, std::move(message), std::move(hint)};
}
inline Status parse_error(std::string message, std::string hint = {}) {
  return {ErrorCode::kParseError, std::move(message), std::move(hint)};
}
inline Status unsupported(std::string message, std::string hint = {}) {
  return {ErrorCode::kUnsupported, std::move(message), std::move(hint)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    TF_CHECK(!std::get<Status>(data_).ok()) << "a Result needs a value or an error";
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(data_);
  }
  const T& value() const& {
    TF_CHECK(ok()) << status().to_string();
    return std::get<T>(data_);
  }
  T& value() & {
    TF_CHECK(ok()) << status().to_string();
    return std::get<T>(data_);
  }
  T&& value() && {
    TF_CHECK(ok()) << status().to_string();
    return std::get<T>(std::move(data_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace trainfit

#define TF_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::trainfit::Status tf_status_ = (expr);  \
    if (!tf_status_.ok()) return tf_status_; \
  } while (false)

#define TF_CONCAT_INNER(a, b) a##b
#define TF_CONCAT(a, b) TF_CONCAT_INNER(a, b)
// `lhs` is a declaration ("Dims shape"), which cannot be parenthesized.
#define TF_ASSIGN_OR_RETURN(lhs, expr)                                                        \
  auto TF_CONCAT(tf_result_, __LINE__) = (expr);                                              \
  if (!TF_CONCAT(tf_result_, __LINE__).ok()) return TF_CONCAT(tf_result_, __LINE__).status(); \
  lhs = std::move(TF_CONCAT(tf_result_, __LINE__)).value()  // NOLINT(bugprone-macro-parentheses)
