// The `trainfit summary` report as text (a 100-column table) and as JSON.
//
//   std::string text = summary_text(summary, /*max_depth=*/3);
//   nlohmann::json j = summary_json(summary, /*max_depth=*/-1);   // -1: every module
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "graph/summary.h"

namespace trainfit {

std::string summary_text(const Summary& summary, int max_depth);
nlohmann::json summary_json(const Summary& summary, int max_depth);

// "cuda (PyTorch 2.x kernels)" / "cpu (PyTorch 1.13 CPU kernels)"
std::string profile_description(const KernelTarget& target);
std::string_view profile_name(const KernelTarget& target);

}  // namespace trainfit
