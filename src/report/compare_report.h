// The `trainfit compare` report: several models side by side, as text and as JSON.
//
//   CompareEntry e{run.header, run.estimate, sets, block_figures(graph_at_batch_1), facts};
//   std::string text = compare_text({a, b});
//   nlohmann::json j = compare_json({a, b});   // {"models": [...]}
#pragma once

#include <nlohmann/json.hpp>
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

// The largest category at the allocated peak, and its share of the peak.
struct Dominant {
  Category category = Category::kActivation;
  int64_t bytes = 0;
  double share = 0;
};
Dominant dominant_category(const Estimate& e);

std::string compare_text(const std::vector<CompareEntry>& entries);
nlohmann::json compare_json(const std::vector<CompareEntry>& entries);

}  // namespace trainfit
