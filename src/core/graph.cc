#include "core/graph.h"

namespace trainfit {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kAmpFp16:
      return "amp-fp16";
    case Precision::kAmpBf16:
      return "amp-bf16";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

int64_t Graph::batch_size() const {
  if (inputs.empty() || value(inputs.front()).shape.empty()) return 1;
  return value(inputs.front()).shape.front();
}

}  // namespace trainfit
