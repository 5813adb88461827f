#include "report/format.h"
#include "report/json.h"

namespace trainfit {

nlohmann::json summary_json(const Summary& s, int max_depth) {
  nlohmann::json j;
  j["model"] = s.model;
  j["batch"] = s.batch;
  j["precision"] = precision_name(s.precision);
  j["device_profile"] = profile_name(s.target);
  j["inputs"] = nlohmann::json::array();
  for (const InputInfo& in : s.inputs) {
    j["inputs"].push_back(
        {{"name", in.name}, {"shape", in.shape}, {"dtype", dtype_name(in.dtype)}});
  }
  j["parameters"] = s.parameters;
  j["trainable_parameters"] = s.trainable_parameters;
  j["frozen_parameters"] = s.parameters - s.trainable_parameters;
  j["parameter_bytes"] = s.parameter_bytes;
  j["buffer_bytes"] = s.buffer_bytes;
  j["input_bytes"] = s.input_bytes;
  j["activation_bytes"] = s.activation_bytes;
  j["activation_bytes_per_sample"] = s.activation_bytes_per_sample;
  j["facts"] = nlohmann::json::object();
  for (const GraphFact& f : s.facts) j["facts"][f.key] = {{"value", f.value}, {"text", f.text}};
  j["modules"] = nlohmann::json::array();
  for (const ModuleRow& m : s.modules) {
    if (max_depth >= 0 && m.depth > max_depth) continue;
    j["modules"].push_back(
        {{"path", m.path},
         {"name", m.name},
         {"type", m.type},
         {"depth", m.depth},
         {"output_shape", m.has_output ? nlohmann::json(m.output_shape) : nlohmann::json()},
         {"repeated", m.repeated},
         {"parameters", m.parameters},
         {"trainable_parameters", m.trainable_parameters},
         {"kept_bytes", m.kept_bytes},
         {"kept_bytes_per_sample", m.kept_bytes_per_sample}});
  }
  return j;
}

}  // namespace trainfit
