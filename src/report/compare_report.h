// The `trainfit compare` report as data: several models side by side, each with its own
// request. text.h and json.h render it.
//
//   Result<std::vector<CompareEntry>> c = make_compare_report({act, diffusion});
//   std::string text = compare_text(*c);
//   nlohmann::json j = compare_json(*c);   // {"models": [...]}
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "graph/blocks.h"
#include "report/estimate_report.h"

namespace trainfit {

struct CompareEntry {
  EstimateHeader header;
  Estimate estimate;
  std::vector<std::pair<std::string, std::string>> sets;  // the --set keys given
  BlockFigures per_sample;  // parameters, and kept bytes per block that one sample adds
  std::vector<GraphFact> facts;
};

// Two or more models, on one device profile. An error names the model it is about.
Status check_model_count(size_t models);
Result<std::vector<CompareEntry>> make_compare_report(const std::vector<TrainingRequest>& requests);

// The largest category at the allocated peak, and its share of the peak.
struct Dominant {
  Category category = Category::kActivation;
  int64_t bytes = 0;
  double share = 0;
};
Dominant dominant_category(const Estimate& e);

}  // namespace trainfit
