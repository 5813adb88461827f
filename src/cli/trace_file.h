// Trace files (`python3 -m trainfit.trace --out FILE`) read from disk for the command line;
// the library parses and fits the text (sources/trace load_trace).
//
//   Result<std::shared_ptr<const TraceModel>> m = read_trace_file("mine.trace.json");
#pragma once

#include <memory>
#include <string>

#include "sources/trace/trace_model.h"

namespace trainfit {

Result<std::shared_ptr<const TraceModel>> read_trace_file(const std::string& path);

}  // namespace trainfit
