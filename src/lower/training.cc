#include "lower/training.h"

namespace trainfit {

std::string_view optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kMomentum:
      return "momentum";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kAdamW:
      return "adamw";
    case OptimizerKind::kAdam8bit:
      return "adam8bit";
    case OptimizerKind::kAdamW8bit:
      return "adamw8bit";
  }
  return "?";
}

std::string_view optimizer_impl_name(OptimizerImpl impl) {
  switch (impl) {
    case OptimizerImpl::kDefault:
      return "default";
    case OptimizerImpl::kForeach:
      return "foreach";
    case OptimizerImpl::kFused:
      return "fused";
    case OptimizerImpl::kLoop:
      return "loop";
  }
  return "?";
}

std::string_view category_name(Category c) {
  switch (c) {
    case Category::kParameter:
      return "parameter";
    case Category::kGradient:
      return "gradient";
    case Category::kOptimizerState:
      return "optimizer_state";
    case Category::kActivation:
      return "activation";
    case Category::kTemporary:
      return "temporary";
    case Category::kInput:
      return "input";
    case Category::kWorkspace:
      return "workspace";
  }
  return "?";
}

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::kSetup:
      return "setup";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizer:
      return "optimizer";
  }
  return "?";
}

bool module_matches(std::string_view path, std::string_view pattern) {
  while (true) {
    const size_t p_end = pattern.find('.');
    const size_t s_end = path.find('.');
    const std::string_view p = pattern.substr(0, p_end);
    const std::string_view s = path.substr(0, s_end);
    if (p != "*" && p != s) return false;
    if (p_end == std::string_view::npos || s_end == std::string_view::npos) {
      return p_end == std::string_view::npos && s_end == std::string_view::npos;
    }
    pattern.remove_prefix(p_end + 1);
    path.remove_prefix(s_end + 1);
  }
}

}  // namespace trainfit
