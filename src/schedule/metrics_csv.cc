#include "schedule/metrics_csv.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <optional>

#include "base/suggest.h"

namespace trainfit {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Fields of one line; double quotes may enclose a field (with "" for a quote).
std::vector<std::string> split_fields(std::string_view line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  for (std::string& f : fields) f = std::string(trim(f));
  return fields;
}

// A number as a logger writes it, including nan and inf (which the caller refuses).
std::optional<double> to_number(std::string_view s) {
  std::string l = lower(s);
  if (l == "nan" || l == "+nan" || l == "-nan") return std::nan("");
  if (l == "inf" || l == "+inf" || l == "infinity") return std::numeric_limits<double>::infinity();
  if (l == "-inf" || l == "-infinity") return -std::numeric_limits<double>::infinity();
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

bool is_counter(std::string_view name) {
  static const std::vector<std::string> kCounters = {
      "epoch",         "step",      "global_step", "wall time", "wall_time",  "walltime",
      "time",          "timestamp", "iteration",   "iter",      "created_at", "lr",
      "learning_rate", "lr-sgd",    "lr-adam",     "lr-adamw"};
  std::string l = lower(name);
  return std::find(kCounters.begin(), kCounters.end(), l) != kCounters.end() ||
         l.rfind("lr-", 0) == 0 || l.rfind("lr_", 0) == 0;
}

struct Row {
  int64_t line;
  std::vector<std::string> fields;
};

}  // namespace

Result<MetricsCurve> parse_metrics_csv(std::string_view text, std::string_view file,
                                       std::string_view column) {
  std::vector<Row> rows;
  int64_t line_no = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\0') != std::string_view::npos) {
      return parse_error(fmt::format("{}:{}: a NUL byte: this is not a CSV file", file, line_no),
                         "give the metrics as a text CSV file");
    }
    if (!trim(line).empty() && trim(line).front() != '#')
      rows.push_back({line_no, split_fields(line)});
    start = end + 1;
  }
  if (rows.empty()) {
    return parse_error(fmt::format("{} has no rows", file),
                       "give one validation value per epoch, with a header such as val_loss");
  }
  // A header when any field of the first row is not a number.
  std::vector<std::string> header;
  bool has_header = std::any_of(rows[0].fields.begin(), rows[0].fields.end(),
                                [](const std::string& f) { return !to_number(f); });
  if (has_header) {
    header = rows[0].fields;
    rows.erase(rows.begin());
  } else {
    for (size_t i = 0; i < rows[0].fields.size(); ++i)
      header.push_back(fmt::format("column {}", i + 1));
  }
  for (const Row& r : rows) {
    if (r.fields.size() != header.size()) {
      return parse_error(fmt::format("{}:{}: {} fields where the header has {}", file, r.line,
                                     r.fields.size(), header.size()),
                         "every row needs the same columns");
    }
  }
  // A column with any number in it; a word among them is reported when the column is read.
  auto numeric = [&](size_t c) {
    return std::any_of(rows.begin(), rows.end(),
                       [&](const Row& r) { return to_number(r.fields[c]).has_value(); });
  };
  size_t chosen = header.size();
  if (!column.empty()) {
    for (size_t c = 0; c < header.size(); ++c) {
      if (header[c] == column) chosen = c;
    }
    if (chosen == header.size()) {
      std::string near = closest(column, header);
      return not_found(fmt::format("{} has no column '{}'", file, column),
                       near.empty() ? fmt::format("its columns: {}", fmt::join(header, ", "))
                                    : fmt::format("did you mean {}?", near));
    }
  } else {
    std::vector<size_t> candidates;
    for (size_t c = 0; c < header.size(); ++c) {
      if (numeric(c) && !is_counter(header[c])) candidates.push_back(c);
    }
    if (candidates.size() > 1) {
      std::vector<size_t> val;
      for (size_t c : candidates) {
        if (lower(header[c]).rfind("val", 0) == 0) val.push_back(c);
      }
      if (val.size() == 1) candidates = val;
    }
    if (candidates.empty()) {
      return parse_error(fmt::format("{} has no numeric column besides epoch, step or time", file),
                         "give a CSV with a column of validation values, e.g. val_loss");
    }
    if (candidates.size() > 1) {
      std::vector<std::string> names;
      names.reserve(candidates.size());
      for (size_t c : candidates) names.push_back(header[c]);
      return invalid_argument(
          fmt::format("{} has several metric columns: {}", file, fmt::join(names, ", ")),
          fmt::format("choose one with --column {}", names.front()));
    }
    chosen = candidates.front();
  }
  MetricsCurve curve;
  curve.column = header[chosen];
  for (const Row& r : rows) {
    const std::string& f = r.fields[chosen];
    if (f.empty()) continue;  // a row that logged other metrics
    std::optional<double> v = to_number(f);
    if (!v) {
      return parse_error(
          fmt::format("{}:{}: {} '{}' is not a number", file, r.line, curve.column, f),
          "every value of the column must be a number");
    }
    if (!std::isfinite(*v)) {
      return parse_error(fmt::format("{}:{}: {} is {}", file, r.line, curve.column, f),
                         "the run diverged there: cut the file before that epoch");
    }
    curve.values.push_back(*v);
    curve.lines.push_back(r.line);
  }
  if (curve.values.empty()) {
    return parse_error(fmt::format("{}: column {} has no values", file, curve.column),
                       "give one validation value per epoch");
  }
  return curve;
}

}  // namespace trainfit
