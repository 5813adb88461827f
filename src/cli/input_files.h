// The files the command line reads from disk: Hugging Face config.json files, traces (`python3 -m
// trainfit.trace --out FILE`), metrics logs (`trainfit schedule --metrics`), GPU profiles (`python3
// -m trainfit.calibrate --out FILE`) and loader profiles
// (`python3 -m trainfit.loader --out FILE`). The library parses the text
// (sources/trace load_trace, sources/calibration parse_gpu_profile, sources/loader
// parse_loader_profile).
//
//   Result<std::string> text = read_input_file("gpu.json", "GPU profile", "write it with ...");
//   Result<std::shared_ptr<const LoaderProfile>> p = read_loader_profile_file("loader.json");
#pragma once

#include <memory>
#include <string>

#include "schedule/metrics_csv.h"
#include "sources/calibration/gpu_profile.h"
#include "sources/hf/hf_config.h"
#include "sources/loader/loader_profile.h"
#include "sources/trace/trace_model.h"

namespace trainfit {

// The whole file, or "cannot open WHAT 'PATH'" with `hint`.
Result<std::string> read_input_file(const std::string& path, std::string_view what,
                                    std::string_view hint);
Result<std::shared_ptr<const LoaderProfile>> read_loader_profile_file(const std::string& path);
Result<MetricsCurve> read_metrics_file(const std::string& path, const std::string& column);
// Writes a report (--html FILE, --timeline FILE): "cannot write --html 'PATH'" on failure.
Status write_report_file(std::string_view option, const std::string& path, const std::string& text);

}  // namespace trainfit
