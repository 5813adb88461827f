#include "base/status.h"

namespace trainfit {

std::string Status::to_string() const {
  if (ok_) return "ok";
  if (hint_.empty()) return message_;
  return message_ + " (hint: " + hint_ + ")";
}

Status Status::with_context(const std::string& context) const {
  if (ok_) return *this;
  return {code_, context + ": " + message_, hint_};
}

}  // namespace trainfit
