#include "cli/model_source.h"

#include <fmt/format.h>

namespace trainfit {

void add_model_source(CLI::App& app, ModelSourceOptions& o) {
  app.add_option("--model", o.model, "zoo model name (see `trainfit models`)");
  app.add_option("--trace", o.trace,
                 "a trace of your own model, written by `python3 -m trainfit.trace` "
                 "(instead of --model)");
  app.add_option("--set", o.sets, "model key=value, repeatable (see `trainfit models`)");
  app.add_option("--batch", o.batch, "batch size")->capture_default_str();
  app.add_option("--input", o.input, "image size CxHxW (image models), e.g. 3x224x224");
  app.add_option("--seq-len", o.seq_len, "tokens per sequence (sequence models)");
  app.add_option("--precision", o.precision, "fp32 | amp-fp16 | amp-bf16 | bf16")
      ->capture_default_str();
  app.add_option("--device-profile", o.device_profile,
                 "cuda (PyTorch 2.x CUDA kernels) | cpu (PyTorch 1.13 CPU kernels, for checking "
                 "against CPU PyTorch)")
      ->capture_default_str();
  app.add_option("--freeze", o.freeze,
                 "parameter-name prefix that does not train, repeatable (e.g. layer1)");
}

Result<ModelRequest> to_request(const ModelSourceOptions& o) {
  if (o.model.empty() == o.trace.empty()) {
    return invalid_argument(o.model.empty() ? "no model given" : "--model and --trace both given",
                            "give --model NAME (see `trainfit models`) or --trace FILE");
  }
  ModelRequest r;
  r.name = o.model;
  r.batch = o.batch;
  if (o.batch < 1) {
    return invalid_argument(fmt::format("--batch must be at least 1, got {}", o.batch),
                            "use --batch 1 or more");
  }
  for (const std::string& s : o.sets) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      return invalid_argument(fmt::format("--set '{}' is not key=value", s),
                              "for example --set num_classes=10");
    }
    r.sets.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
  if (!o.input.empty()) {
    Result<Dims> dims = parse_dims(o.input);
    if (!dims.ok()) {
      return invalid_argument(fmt::format("--input '{}': {}", o.input, dims.status().message()),
                              "use CxHxW, for example 3x224x224");
    }
    r.input = *dims;
  }
  r.seq_len = o.seq_len;
  if (o.precision == "fp32") {
    r.options.precision = Precision::kFp32;
  } else if (o.precision == "amp-fp16") {
    r.options.precision = Precision::kAmpFp16;
  } else if (o.precision == "amp-bf16") {
    r.options.precision = Precision::kAmpBf16;
  } else if (o.precision == "bf16") {
    r.options.precision = Precision::kBf16;
  } else {
    return invalid_argument(fmt::format("unknown --precision '{}'", o.precision),
                            "use fp32, amp-fp16, amp-bf16 or bf16");
  }
  if (o.device_profile == "cuda") {
    r.options.target = {Device::kCuda, TorchVersion::k2};
  } else if (o.device_profile == "cpu") {
    r.options.target = {Device::kCpu, TorchVersion::k1_13};
    if (r.options.precision == Precision::kAmpFp16 || r.options.precision == Precision::kAmpBf16) {
      return unsupported("the cpu profile does not model CPU autocast",
                         "use --device-profile cuda for AMP, or --precision fp32/bf16");
    }
  } else {
    return invalid_argument(fmt::format("unknown --device-profile '{}'", o.device_profile),
                            "use cuda or cpu");
  }
  r.options.freeze = o.freeze;
  return r;
}

}  // namespace trainfit
