// Invariant checks for programming errors (never for bad user input, which gets a Status).
//
//   TF_CHECK(node.outputs.size() == 1) << "op " << name;
//
// A failed check prints the condition and location and aborts: it marks a bug in trainfit.
#pragma once

#include <sstream>

namespace trainfit {

class CheckFailure {
 public:
  CheckFailure(const char* condition, const char* file, int line);
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  [[noreturn]] ~CheckFailure();

  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

}  // namespace trainfit

#define TF_CHECK(condition) \
  if (condition) {          \
  } else                    \
    ::trainfit::CheckFailure(#condition, __FILE__, __LINE__)
