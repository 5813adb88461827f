// The doctor's report as text for a terminal and as one JSON object.
//
//   std::cout << doctor_text(host, gpus, findings);
//   std::cout << doctor_json(host, gpus, findings).dump(2);
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "host/doctor.h"

namespace trainfit {

std::string doctor_text(const HostInfo& host, const GpuReport& gpus,
                        const std::vector<Finding>& findings);
// Findings as the host commands print them: severity and title, then "why:" and "fix:" lines,
// wrapped to `width` columns, each line starting with `prefix`.
std::string findings_text(const std::vector<Finding>& findings, const std::string& prefix = "  ",
                          size_t width = 100);
nlohmann::json findings_json(const std::vector<Finding>& findings);

// The text of a host report's JSON: indented, and safe with what a host's files hold (bytes that
// are not UTF-8 become U+FFFD instead of failing).
std::string json_text(const nlohmann::json& j);

// A value the host did not expose is null in the JSON.
template <typename T>
nlohmann::json json_or_null(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json doctor_json(const HostInfo& host, const GpuReport& gpus,
                           const std::vector<Finding>& findings);

}  // namespace trainfit
