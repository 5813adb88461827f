#include "cli/trace_file.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace trainfit {

Result<std::shared_ptr<const TraceModel>> read_trace_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return not_found(fmt::format("cannot open trace '{}'", path),
                     "give the path of a file written by `python3 -m trainfit.trace --out`");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return load_trace(text.str(), path);
}

}  // namespace trainfit
