#include "cli/input_files.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace trainfit {
Result<std::string> read_input_file(const std::string& path, std::string_view what,
                                    std::string_view hint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("cannot open {} '{}'", what, path), std::string(hint));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Result<std::shared_ptr<const LoaderProfile>> read_loader_profile_file(const std::string& path) {
  TF_ASSIGN_OR_RETURN(
      const std::string text,
      read_input_file(
          path, "loader profile",
          "write it with `python3 -m trainfit.loader --dataset MODULE:FACTORY --out FILE` "
          "on the host that trains"));
  TF_ASSIGN_OR_RETURN(LoaderProfile profile, parse_loader_profile(text, path));
  return std::make_shared<const LoaderProfile>(std::move(profile));
}

Status write_report_file(std::string_view option, const std::string& path,
                         const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (f) f << text;
  if (!f) {
    return invalid_argument(fmt::format("cannot write {} '{}'", option, path),
                            "check that its folder exists and is writable");
  }
  return {};
}

Result<MetricsCurve> read_metrics_file(const std::string& path, const std::string& column) {
  TF_ASSIGN_OR_RETURN(
      const std::string text,
      read_input_file(path, "metrics file",
                      "give a CSV with one validation value per epoch (a logger's metrics.csv, or "
                      "TensorBoard's scalars downloaded as CSV)"));
  return parse_metrics_csv(text, path, column);
}

}  // namespace trainfit
