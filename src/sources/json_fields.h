// Fields of one object in a JSON file trainfit reads (a trace, a GPU profile), each error naming
// the object ("runs[0].events[12]: 'bytes' must be an integer") with the file's hint.
//
//   JsonFields f(doc, "trace", "trace the model again with ...");
//   TF_ASSIGN_OR_RETURN(int64_t batch, f.integer("batch", 1));
//   TF_ASSIGN_OR_RETURN(JsonFields run, object_at(*runs, 0, "runs", f.hint()));
#pragma once

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "base/status.h"

namespace trainfit {

class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string where, std::string_view hint)
      : j_(object), where_(std::move(where)), hint_(hint) {}

  const std::string& where() const { return where_; }
  std::string_view hint() const { return hint_; }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  Status error(const std::string& what) const {
    return parse_error(fmt::format("{}: {}", where_, what), std::string(hint_));
  }

  Result<int64_t> integer(const char* key, int64_t min) const {
    if (!j_.contains(key)) return error(fmt::format("'{}' is missing", key));
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number_integer()) return error(fmt::format("'{}' must be an integer", key));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return error(fmt::format("'{}' is too large", key));
    }
    const auto n = v.get<int64_t>();
    if (n < min) return error(fmt::format("'{}' must be at least {}, got {}", key, min, n));
    return n;
  }

  // A finite number above zero and at most `max`.
  Result<double> positive(const char* key, double max) const {
    if (!j_.contains(key)) return error(fmt::format("'{}' is missing", key));
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number()) return error(fmt::format("'{}' must be a number", key));
    const auto x = v.get<double>();
    if (!std::isfinite(x) || x <= 0 || x > max) {
      return error(fmt::format("'{}' must be above 0 and at most {:g}, got {:g}", key, max, x));
    }
    return x;
  }

  Result<std::string> string(const char* key) const {
    if (!j_.contains(key)) return error(fmt::format("'{}' is missing", key));
    const nlohmann::json& v = j_.at(key);
    if (!v.is_string()) return error(fmt::format("'{}' must be a string", key));
    return v.get<std::string>();
  }

  std::string string_or(const char* key, const std::string& fallback) const {
    return has(key) && j_.at(key).is_string() ? j_.at(key).get<std::string>() : fallback;
  }

  Result<bool> boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) return error(fmt::format("'{}' must be true or false", key));
    return j_.at(key).get<bool>();
  }

  // An integer in [min, max].
  Result<int64_t> integer_in(const char* key, int64_t min, int64_t max) const {
    TF_ASSIGN_OR_RETURN(const int64_t n, integer(key, min));
    if (n > max) return error(fmt::format("'{}' must be at most {}, got {}", key, max, n));
    return n;
  }

  // An integer in [min, max], or nullopt where the key is missing or null.
  Result<std::optional<int64_t>> integer_in_or_null(const char* key, int64_t min,
                                                    int64_t max) const {
    if (!has(key)) return std::optional<int64_t>();
    TF_ASSIGN_OR_RETURN(const int64_t n, integer_in(key, min, max));
    return std::optional<int64_t>(n);
  }

  // A finite number in [min, max].
  Result<double> number(const char* key, double min, double max) const {
    if (!j_.contains(key)) return error(fmt::format("'{}' is missing", key));
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number()) return error(fmt::format("'{}' must be a number", key));
    const auto x = v.get<double>();
    if (!std::isfinite(x) || x < min || x > max) {
      return error(fmt::format("'{}' must be between {:g} and {:g}, got {:g}", key, min, max, x));
    }
    return x;
  }

  Result<std::optional<double>> number_or_null(const char* key, double min, double max) const {
    if (!has(key)) return std::optional<double>();
    TF_ASSIGN_OR_RETURN(const double x, number(key, min, max));
    return std::optional<double>(x);
  }

  // The object at `key`, named "<where>.<key>" in errors.
  Result<JsonFields> object(const char* key) const {
    if (!j_.contains(key)) return error(fmt::format("'{}' is missing", key));
    if (!j_.at(key).is_object()) return error(fmt::format("'{}' must be an object", key));
    return JsonFields(j_.at(key), fmt::format("{}.{}", where_, key), hint_);
  }

  Result<std::optional<JsonFields>> object_or_null(const char* key) const {
    if (!has(key)) return std::optional<JsonFields>();
    TF_ASSIGN_OR_RETURN(JsonFields f, object(key));
    return std::optional<JsonFields>(std::move(f));
  }

  const nlohmann::json& json() const { return j_; }

  Result<const nlohmann::json*> array(const char* key) const {
    if (!j_.contains(key)) return error(fmt::format("'{}' is missing", key));
    if (!j_.at(key).is_array()) return error(fmt::format("'{}' must be a list", key));
    return &j_.at(key);
  }

 private:
  const nlohmann::json& j_;
  std::string where_;
  std::string_view hint_;
};

// An integer member of T and the key and range it is read from, for reading a struct's sizes
// from a table: read_integers(f, kFields, out).
template <typename T>
struct IntegerField {
  const char* key;
  int64_t T::*member;
  int64_t min;
  int64_t max;
};

template <typename T, size_t N>
Status read_integers(const JsonFields& f, const std::array<IntegerField<T>, N>& fields, T& out) {
  for (const IntegerField<T>& field : fields) {
    TF_ASSIGN_OR_RETURN(out.*field.member, f.integer_in(field.key, field.min, field.max));
  }
  return {};
}

// The i-th element of a list, which must be an object; "<list>[i]" names it in errors.
inline Result<JsonFields> object_at(const nlohmann::json& list, size_t i, std::string_view name,
                                    std::string_view hint) {
  std::string where = fmt::format("{}[{}]", name, i);
  if (!list[i].is_object()) return parse_error(where + ": must be an object", std::string(hint));
  return JsonFields(list[i], std::move(where), hint);
}

// A whole file's JSON, or "SOURCE: not valid JSON (parse error at ...)" with `hint`.
inline Result<nlohmann::json> parse_json_file(std::string_view text, std::string_view source,
                                              std::string_view hint) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    const size_t at = what.find("parse error");
    if (at != std::string::npos) what = what.substr(at);
    return parse_error(fmt::format("{}: not valid JSON ({})", source, what), std::string(hint));
  }
}

}  // namespace trainfit
