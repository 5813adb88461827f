// Per-module summary of a graph: output shape, parameters, bytes kept for backward.
//
//   Graph g = *build_model(request);            // at the batch
//   Graph one = *build_model(request_batch_1);  // for per-sample figures
//   Summary s = summarize(g, &one);
//   s.modules[i].kept_bytes, s.activation_bytes ...
//
// Parameters count where they were created (a module entered again reuses them); kept bytes
// count in the module whose op allocated the storage. Both roll up to every ancestor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace trainfit {

struct ModuleRow {
  std::string path;
  std::string name;
  std::string type;
  int depth = 0;
  Dims output_shape;
  bool has_output = false;
  bool repeated = false;  // this module path already ran earlier (a reused module)
  int64_t parameters = 0;
  int64_t trainable_parameters = 0;
  int64_t kept_bytes = 0;
  int64_t kept_bytes_per_sample = -1;  // -1: not computed
};

struct InputInfo {
  std::string name;
  Dims shape;
  DType dtype = DType::kFloat32;
};

struct Summary {
  std::string model;
  int64_t batch = 1;
  std::vector<InputInfo> inputs;
  KernelTarget target;
  Precision precision = Precision::kFp32;
  int64_t parameters = 0;
  int64_t trainable_parameters = 0;
  int64_t parameter_bytes = 0;
  int64_t buffer_bytes = 0;
  int64_t input_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t activation_bytes_per_sample = -1;
  std::vector<ModuleRow> modules;
  std::vector<GraphFact> facts;  // what the model derives from its keys (ACT's encoder tokens)
  // Made from a trace: per-sample figures are the growth from the batch to one more, and the
  // inputs are known by their bytes only.
  bool from_trace = false;
};

// `per_sample` is the same model built at batch 1 (may be null).
Summary summarize(const Graph& graph, const Graph* per_sample);

}  // namespace trainfit
