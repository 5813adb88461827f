#include "graph/attrs.h"

#include <fmt/format.h>

#include "base/check.h"

namespace trainfit {

std::string attr_value_string(const AttrValue& value) {
  struct Visitor {
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return fmt::format("{}", v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return v; }
    std::string operator()(const Dims& v) const { return fmt::format("[{}]", fmt::join(v, ",")); }
  };
  return std::visit(Visitor{}, value);
}

Attrs::Attrs(std::initializer_list<std::pair<std::string_view, AttrValue>> items) {
  for (const auto& [name, value] : items) set(name, value);
}

Attrs& Attrs::set(std::string_view name, AttrValue value) {
  for (auto& [n, v] : items_) {
    if (n == name) {
      v = std::move(value);
      return *this;
    }
  }
  items_.emplace_back(std::string(name), std::move(value));
  return *this;
}

const AttrValue* Attrs::find(std::string_view name) const {
  for (const auto& [n, v] : items_) {
    if (n == name) return &v;
  }
  return nullptr;
}

namespace {

const AttrValue& require(const Attrs& attrs, std::string_view name) {
  const AttrValue* v = attrs.find(name);
  TF_CHECK(v != nullptr) << "missing attribute " << name;
  return *v;
}

}  // namespace

int64_t Attrs::get_int(std::string_view name) const {
  const AttrValue& v = require(*this, name);
  TF_CHECK(std::holds_alternative<int64_t>(v)) << "attribute " << name << " is not an int";
  return std::get<int64_t>(v);
}

double Attrs::get_float(std::string_view name) const {
  const AttrValue& v = require(*this, name);
  if (std::holds_alternative<int64_t>(v)) return static_cast<double>(std::get<int64_t>(v));
  TF_CHECK(std::holds_alternative<double>(v)) << "attribute " << name << " is not a float";
  return std::get<double>(v);
}

bool Attrs::get_bool(std::string_view name) const {
  const AttrValue& v = require(*this, name);
  TF_CHECK(std::holds_alternative<bool>(v)) << "attribute " << name << " is not a bool";
  return std::get<bool>(v);
}

const std::string& Attrs::get_string(std::string_view name) const {
  const AttrValue& v = require(*this, name);
  TF_CHECK(std::holds_alternative<std::string>(v)) << "attribute " << name << " is not a string";
  return std::get<std::string>(v);
}

const Dims& Attrs::get_ints(std::string_view name) const {
  const AttrValue& v = require(*this, name);
  TF_CHECK(std::holds_alternative<Dims>(v)) << "attribute " << name << " is not an int list";
  return std::get<Dims>(v);
}

Dims Attrs::get_ints(std::string_view name, size_t n) const {
  const AttrValue& v = require(*this, name);
  if (std::holds_alternative<int64_t>(v)) return Dims(n, std::get<int64_t>(v));
  const Dims& d = get_ints(name);
  if (d.size() == 1) return Dims(n, d[0]);
  TF_CHECK(d.size() == n) << "attribute " << name << " needs " << n << " values";
  return d;
}

}  // namespace trainfit
