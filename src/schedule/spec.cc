#include "schedule/spec.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

namespace trainfit {
namespace {

constexpr size_t kMaxDepth = 16;  // nested calls and lists; deeper input is refused

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// Recursive descent over one expression; `pos_` is where the next token starts.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<SchedulerSpec> call(size_t depth) {
    skip_space();
    std::string name = word();
    if (name.empty()) return error("a scheduler name such as StepLR");
    SchedulerSpec spec;
    spec.name = name;
    skip_space();
    if (!consume('(')) return spec;
    skip_space();
    bool keyword_seen = false;
    while (!consume(')')) {
      if (pos_ >= text_.size()) return error("')'");
      size_t save = pos_;
      std::string key = word();
      skip_space();
      if (!key.empty() && peek() == '=') {
        ++pos_;
        Result<SpecValue> v = value(depth + 1);
        if (!v.ok()) return v.status();
        for (const auto& [k, unused] : spec.keywords) {
          if (k == key) {
            return invalid_argument(fmt::format("'{}' is given twice in {}(...)", key, name),
                                    "give each keyword once");
          }
        }
        spec.keywords.emplace_back(key, std::move(*v));
        keyword_seen = true;
      } else {
        pos_ = save;
        if (keyword_seen) {
          return invalid_argument(
              fmt::format("a positional argument follows a keyword in {}(...)", name),
              "write it as key=value, as Python requires");
        }
        Result<SpecValue> v = value(depth + 1);
        if (!v.ok()) return v.status();
        spec.positional.push_back(std::move(*v));
      }
      skip_space();
      if (consume(',')) {
        skip_space();
        continue;
      }
      if (peek() != ')') return error("',' or ')'");
    }
    return spec;
  }

  Result<SpecValue> value(size_t depth) {
    if (depth > kMaxDepth) {
      return invalid_argument("the scheduler is nested too deeply",
                              "write at most 16 levels of calls and lists");
    }
    skip_space();
    SpecValue v;
    char c = peek();
    if (c == '[' || c == '(') {
      char close = c == '[' ? ']' : ')';
      ++pos_;
      v.kind = SpecValue::Kind::kList;
      skip_space();
      while (!consume(close)) {
        Result<SpecValue> item = value(depth + 1);
        if (!item.ok()) return item.status();
        v.list.push_back(std::move(*item));
        skip_space();
        if (consume(',')) {
          skip_space();
          continue;
        }
        if (peek() != close) return error(fmt::format("',' or '{}'", close));
      }
      return v;
    }
    if (c == '\'' || c == '"') {
      ++pos_;
      size_t end = text_.find(c, pos_);
      if (end == std::string_view::npos) return error(fmt::format("a closing {}", c));
      v.kind = SpecValue::Kind::kString;
      v.text = std::string(text_.substr(pos_, end - pos_));
      pos_ = end + 1;
      return v;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.') {
      return number();
    }
    size_t save = pos_;
    std::string w = word();
    if (w.empty()) return error("a value");
    skip_space();
    if (peek() == '(') {
      pos_ = save;
      Result<SchedulerSpec> nested = call(depth + 1);
      if (!nested.ok()) return nested.status();
      v.kind = SpecValue::Kind::kCall;
      v.call = std::make_shared<SchedulerSpec>(std::move(*nested));
      return v;
    }
    if (w == "True" || w == "False" || w == "true" || w == "false") {
      v.kind = SpecValue::Kind::kBool;
      v.boolean = w[0] == 'T' || w[0] == 't';
      return v;
    }
    if (w == "inf") {
      v.number = std::numeric_limits<double>::infinity();
      return v;
    }
    v.kind = SpecValue::Kind::kString;
    v.text = w;
    return v;
  }

  Result<SpecValue> number() {
    size_t start = pos_;
    if (peek() == '-' || peek() == '+') ++pos_;
    while (pos_ < text_.size() && (is_name_char(text_[pos_]) || text_[pos_] == '.' ||
                                   ((text_[pos_] == '-' || text_[pos_] == '+') &&
                                    (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E')))) {
      ++pos_;
    }
    std::string token(text_.substr(start, pos_ - start));
    std::string digits = token;
    if (!digits.empty() && digits[0] == '+') digits.erase(0, 1);
    SpecValue v;
    double parsed = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), parsed);
    if (ec != std::errc() || end != digits.data() + digits.size() || std::isnan(parsed)) {
      return invalid_argument(fmt::format("'{}' is not a number", token),
                              "write numbers as Python does: 30, 0.1, 1e-6");
    }
    v.number = parsed;
    v.is_integer = digits.find_first_of(".eEnN") == std::string::npos;
    if (v.is_integer && std::fabs(parsed) > 9.0e15) {
      return out_of_range(fmt::format("{} is too large", token), "use a smaller number");
    }
    return v;
  }

  bool at_end() {
    skip_space();
    return pos_ >= text_.size();
  }
  Status trailing() const {
    return invalid_argument(fmt::format("unexpected '{}' after the scheduler", text_.substr(pos_)),
                            "write one call such as StepLR(step_size=30, gamma=0.1)");
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  std::string word() {
    size_t start = pos_;
    while (pos_ < text_.size() && (is_name_char(text_[pos_]) || text_[pos_] == '.')) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }
  Status error(std::string_view expected) const {
    std::string_view rest = text_.substr(std::min(pos_, text_.size()));
    return invalid_argument(fmt::format("expected {} at '{}' in '{}'", expected,
                                        rest.empty() ? "the end" : rest, text_),
                            "write the scheduler as in Python: StepLR(step_size=30, gamma=0.1)");
  }

  std::string_view text_;
  size_t pos_ = 0;
};

std::string format_number(double x, bool is_integer) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (is_integer) return fmt::format("{}", static_cast<int64_t>(x));
  std::string s = fmt::format("{}", x);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

std::string SpecValue::to_python() const {
  switch (kind) {
    case Kind::kNumber:
      return format_number(number, is_integer);
    case Kind::kString:
      return fmt::format("'{}'", text);
    case Kind::kBool:
      return boolean ? "True" : "False";
    case Kind::kList: {
      std::string s = "[";
      for (size_t i = 0; i < list.size(); ++i) s += (i ? ", " : "") + list[i].to_python();
      return s + "]";
    }
    case Kind::kCall:
      return call->to_python();
  }
  return "";
}

std::string SchedulerSpec::to_python() const {
  std::string s = name + "(";
  bool first = true;
  for (const SpecValue& v : positional) {
    s += (first ? "" : ", ") + v.to_python();
    first = false;
  }
  for (const auto& [key, v] : keywords) {
    s += (first ? "" : ", ") + key + "=" + v.to_python();
    first = false;
  }
  return s + ")";
}

Result<SchedulerSpec> parse_scheduler_spec(std::string_view text) {
  Parser p(text);
  Result<SchedulerSpec> spec = p.call(0);
  if (!spec.ok()) return spec.status();
  if (!p.at_end()) return p.trailing();
  return spec;
}

Result<SpecValue> parse_spec_value(std::string_view text) {
  // A comma outside brackets makes a list: milestones=30,80.
  int depth = 0;
  bool top_comma = false;
  for (char c : text) {
    if (c == '[' || c == '(') ++depth;
    if (c == ']' || c == ')') --depth;
    if (c == ',' && depth == 0) top_comma = true;
  }
  std::string wrapped = top_comma ? fmt::format("[{}]", text) : std::string(text);
  Parser p(wrapped);
  Result<SpecValue> v = p.value(0);
  if (!v.ok()) return v.status();
  if (!p.at_end()) {
    return invalid_argument(fmt::format("'{}' is not one value", text),
                            "write a number, a word, or a list such as 30,80");
  }
  return v;
}

Status add_set(SchedulerSpec& spec, std::string_view key_value) {
  size_t eq = key_value.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return invalid_argument(fmt::format("--set '{}' is not key=value", key_value),
                            "for example --set T_0=10");
  }
  std::string key(key_value.substr(0, eq));
  for (const auto& [k, unused] : spec.keywords) {
    if (k == key) {
      return invalid_argument(fmt::format("'{}' is given twice", key), "give each keyword once");
    }
  }
  Result<SpecValue> v = parse_spec_value(key_value.substr(eq + 1));
  if (!v.ok()) return v.status().with_context(fmt::format("--set {}", key));
  spec.keywords.emplace_back(key, std::move(*v));
  return {};
}

}  // namespace trainfit
