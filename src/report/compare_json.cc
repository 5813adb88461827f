#include "report/json.h"

namespace trainfit {

nlohmann::json compare_json(const std::vector<CompareEntry>& entries) {
  nlohmann::json models = nlohmann::json::array();
  for (const CompareEntry& e : entries) {
    nlohmann::json j = estimate_json(e.header, e.estimate);
    j["sets"] = nlohmann::json::object();
    for (const auto& [k, v] : e.sets) j["sets"][k] = v;
    j["facts"] = nlohmann::json::object();
    for (const GraphFact& f : e.facts) j["facts"][f.key] = {{"value", f.value}, {"text", f.text}};
    nlohmann::json blocks = nlohmann::json::array();
    for (const BlockRow& b : e.per_sample.blocks) {
      blocks.push_back({{"block", b.block},
                        {"parameters", b.parameters},
                        {"kept_bytes_per_sample", b.kept_bytes}});
    }
    j["blocks"] = blocks;
    j["activation_bytes_per_sample"] = e.per_sample.kept_bytes;
    j["attention_bytes_per_sample"] = e.per_sample.attention_known
                                          ? nlohmann::json(e.per_sample.attention_bytes)
                                          : nlohmann::json();
    const Dominant d = dominant_category(e.estimate);
    j["dominant"] = {
        {"category", category_name(d.category)}, {"bytes", d.bytes}, {"share", d.share}};
    models.push_back(std::move(j));
  }
  return {{"models", models}};
}

}  // namespace trainfit
