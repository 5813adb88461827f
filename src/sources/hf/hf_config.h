// A Hugging Face model's config.json, read offline, as the zoo model and --set keys that build
// the same network (`trainfit estimate --hf-config config.json`).
//
//   Result<HfModel> m = parse_hf_config(text, "llama-3-8b.json");
//   ModelRequest r{.name = m->model, .sets = m->sets, ...};
//
// Supported model_type values and the zoo model each maps to: hf_model_types(). Fields the
// memory does not depend on (token ids, initializer_range, rope_scaling) are ignored; torch_dtype
// (the dtype from_pretrained loads by default from transformers 5) is read. A missing required
// field, a wrong type or an unknown model_type is one error line.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace trainfit {

struct HfModel {
  std::string model_type;                                 // "llama"
  std::string model;                                      // the zoo model: "llama"
  std::vector<std::pair<std::string, std::string>> sets;  // --set keys, in the file's terms
};

Result<HfModel> parse_hf_config(std::string_view text, std::string_view source);

// The model_type values parse_hf_config reads, in the order `trainfit models` lists them.
std::vector<std::string_view> hf_model_types();

}  // namespace trainfit
