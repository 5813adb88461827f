// Limits on what a user's input may ask trainfit to build: past them a request is refused in one
// line instead of taking the host's memory. The graph's own limits sit with what they bound
// (kMaxOps in graph/builder.h, kMaxLoweredOps in lower/lowering.h).
#pragma once

#include <cstdint>

namespace trainfit {

// The most a count of repeated blocks (layers, experts) may be, in --set keys and in configs:
// ten thousand, some 80 times the deepest of the language models people fine-tune (Llama 3.1
// 405B, 126 layers). A count mistyped by orders of magnitude is refused before any of it is
// built.
inline constexpr int64_t kMaxRepeats = 10'000;

}  // namespace trainfit
