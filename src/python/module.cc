// trainfit's Python binding, `trainfit._trainfit`: the library's reports in process. It binds
// the library (typed requests, the report builders and their JSON), not the command line.
//
//   trace = _trainfit.load_trace(text, "mine.trace.json")        # parsed and fitted once
//   text = _trainfit.estimate({"trace": trace, "batch": 64, "gpu": "rtx4090"}, False)
//
// python/trainfit/api.py gives these typed keywords and docstrings, and turns the JSON text
// (what `--json` prints) into a dict. Bad input raises the module's `Error` (api.py sets it to
// trainfit.Error) with the library's one-line message and hint.
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/suggest.h"
#include "pipeline/request_options.h"
#include "report/csv.h"
#include "report/html.h"
#include "report/json.h"
#include "report/summary_report.h"
#include "sources/hf/hf_config.h"

namespace py = pybind11;

namespace trainfit {
namespace {

// A loaded trace, shared by every request that names it.
struct TraceHandle {
  std::shared_ptr<const TraceModel> model;
  std::string source;
};

std::string type_name(const py::handle& value) {
  return py::str(py::type::of(value).attr("__name__"));
}

Status wrong_type(const std::string& key, const py::handle& value, std::string_view want) {
  return invalid_argument(fmt::format("{} must be {}, not {}", key, want, type_name(value)),
                          fmt::format("for example {}", want));
}

Result<std::string> text_of(const std::string& key, const py::handle& v) {
  if (!py::isinstance<py::str>(v)) return wrong_type(key, v, "a string");
  return v.cast<std::string>();
}

Result<int64_t> int_of(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::bool_>(v) || !py::isinstance<py::int_>(v)) {
    return wrong_type(key, v, "an int");
  }
  try {
    return v.cast<int64_t>();
  } catch (const py::cast_error&) {
    return out_of_range(fmt::format("{} does not fit in 64 bits", key), "use a smaller number");
  }
}

Result<std::vector<std::string>> strings_of(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::str>(v)) return std::vector<std::string>{v.cast<std::string>()};
  if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) {
    return wrong_type(key, v, "a string or a list of strings");
  }
  std::vector<std::string> out;
  for (const py::handle& item : v) {
    TF_ASSIGN_OR_RETURN(std::string s, text_of(key, item));
    out.push_back(std::move(s));
  }
  return out;
}

// Bytes: an int, or a size such as "24GiB".
Result<int64_t> size_of(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::str>(v)) return parse_size(key, v.cast<std::string>());
  TF_ASSIGN_OR_RETURN(const int64_t bytes, int_of(key, v));
  if (bytes <= 0) {
    return invalid_argument(fmt::format("{} must be positive, got {}", key, bytes),
                            "give bytes, or a size such as \"24GiB\"");
  }
  return bytes;
}

Result<Dims> dims_of(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::str>(v)) {
    Result<Dims> dims = parse_dims(v.cast<std::string>());
    if (!dims.ok()) return dims.status().with_context(key);
    return dims;
  }
  if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) {
    return wrong_type(key, v, "a tuple of ints such as (3, 224, 224)");
  }
  Dims dims;
  for (const py::handle& item : v) {
    TF_ASSIGN_OR_RETURN(const int64_t d, int_of(key, item));
    if (d < 1) {
      return invalid_argument(fmt::format("{} sizes must be positive", key), "e.g. (3, 224, 224)");
    }
    dims.push_back(d);
  }
  return dims;
}

Result<double> number_of(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::bool_>(v) ||
      (!py::isinstance<py::float_>(v) && !py::isinstance<py::int_>(v))) {
    return wrong_type(key, v, "a number");
  }
  return v.cast<double>();
}

// A --set value or a LoRA field as Python typed it.
Result<FieldValue> field_of(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return FieldValue{v.cast<bool>()};
  if (py::isinstance<py::int_>(v)) {
    TF_ASSIGN_OR_RETURN(const int64_t n, int_of(key, v));
    return FieldValue{n};
  }
  if (py::isinstance<py::float_>(v)) return FieldValue{v.cast<double>()};
  if (py::isinstance<py::str>(v)) return FieldValue{v.cast<std::string>()};
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    std::vector<std::string> items;
    for (const py::handle& item : v) items.emplace_back(py::str(item));
    return FieldValue{std::move(items)};
  }
  return wrong_type(key, v, "a bool, number, string or list");
}

Result<OptionFields> fields_of(const std::string& key, const py::handle& v) {
  if (!py::isinstance<py::dict>(v)) return wrong_type(key, v, "a dict such as {\"k\": 1}");
  OptionFields fields;
  for (const auto& [k, value] : v.cast<py::dict>()) {
    const std::string field = py::str(k);
    TF_ASSIGN_OR_RETURN(FieldValue typed, field_of(fmt::format("{}[{}]", key, field), value));
    fields.emplace_back(field, std::move(typed));
  }
  return fields;
}

// A keyword's value as the option's kind takes it (what the command line gives as text).
Result<OptionValue> value_of(const RequestOption& o, const std::string& key, const py::handle& v) {
  switch (o.kind) {
    case OptionKind::kBool:
      if (!py::isinstance<py::bool_>(v)) return wrong_type(key, v, "True or False");
      return OptionValue{v.cast<bool>()};
    case OptionKind::kInt: {
      TF_ASSIGN_OR_RETURN(const int64_t n, int_of(key, v));
      return OptionValue{n};
    }
    case OptionKind::kFloat: {
      TF_ASSIGN_OR_RETURN(const double x, number_of(key, v));
      return OptionValue{x};
    }
    case OptionKind::kSize: {
      TF_ASSIGN_OR_RETURN(const int64_t bytes, size_of(key, v));
      return OptionValue{bytes};
    }
    case OptionKind::kFraction: {
      if (py::isinstance<py::str>(v)) {
        TF_ASSIGN_OR_RETURN(const double share, parse_margin(key, v.cast<std::string>()));
        return OptionValue{share};
      }
      TF_ASSIGN_OR_RETURN(const double share, number_of(key, v));
      return OptionValue{share};
    }
    case OptionKind::kEnum:
    case OptionKind::kText: {
      TF_ASSIGN_OR_RETURN(std::string text, text_of(key, v));
      return OptionValue{std::move(text)};
    }
    case OptionKind::kShape: {
      TF_ASSIGN_OR_RETURN(Dims dims, dims_of(key, v));
      return OptionValue{std::move(dims)};
    }
    case OptionKind::kList: {
      TF_ASSIGN_OR_RETURN(std::vector<std::string> items, strings_of(key, v));
      return OptionValue{std::move(items)};
    }
    case OptionKind::kKeyValues: {
      TF_ASSIGN_OR_RETURN(OptionFields fields, fields_of(key, v));
      return OptionValue{std::move(fields)};
    }
    case OptionKind::kLora: {
      if (py::isinstance<py::str>(v)) {
        TF_ASSIGN_OR_RETURN(OptionFields fields, split_lora(v.cast<std::string>()));
        return OptionValue{std::move(fields)};
      }
      TF_ASSIGN_OR_RETURN(OptionFields fields, fields_of(key, v));
      return OptionValue{std::move(fields)};
    }
    case OptionKind::kTrace: {
      if (!py::isinstance<TraceHandle>(v)) return wrong_type(key, v, "trainfit.load_trace(...)");
      const auto& handle = v.cast<const TraceHandle&>();
      return OptionValue{OptionTrace{.model = handle.model, .source = handle.source}};
    }
    case OptionKind::kFile: {
      // api.py reads the file: (path, text).
      if (!py::isinstance<py::tuple>(v) || py::len(v) != 2 ||
          !py::isinstance<py::str>(v.cast<py::tuple>()[0]) ||
          !py::isinstance<py::str>(v.cast<py::tuple>()[1])) {
        return wrong_type(key, v, fmt::format("a {}'s path", o.file_what));
      }
      auto [path, text] = v.cast<std::pair<std::string, std::string>>();
      return OptionValue{OptionFile{.path = std::move(path), .text = std::move(text)}};
    }
  }
  return wrong_type(key, v, "a value");
}

Status unknown_key(const std::string& key, RequestCommand command) {
  std::vector<std::string> keys;
  for (const RequestOption* o : request_options_of(command)) keys.emplace_back(o->key);
  const std::string guess = closest(key, keys);
  return invalid_argument(
      fmt::format("unknown option '{}'", key),
      guess.empty() ? fmt::format("see help(trainfit.{})", kRequestCommandNames.name(command))
                    : fmt::format("did you mean '{}'?", guess));
}

// Keywords (None left out) as a request for `command`; the library checks the rest.
Result<TrainingRequest> request_of(const py::dict& options, RequestCommand command) {
  RequestDraft draft;
  for (const auto& [k, v] : options) {
    const std::string key = py::str(k);
    if (v.is_none()) continue;
    const RequestOption* o = find_request_option(key);
    if (o == nullptr || ((o->commands | o->refused) & bit(command)) == 0) {
      return unknown_key(key, command);
    }
    TF_ASSIGN_OR_RETURN(const OptionValue value, value_of(*o, key, v));
    TF_RETURN_IF_ERROR(set_request_option(draft, *o, command, value, key));
  }
  return finish_request(std::move(draft));
}

// The option table as data: docs/options.md and the test that holds api.py to it read it.
py::list option_table() {
  py::list rows;
  for (const RequestOption& o : request_options()) {
    py::dict row;
    row["key"] = std::string(o.key);
    row["flag"] = option_flag(o);
    row["group"] = std::string(kOptionGroupNames.name(o.group));
    row["kind"] = std::string(kOptionKindNames.name(o.kind));
    row["default"] = std::string(o.default_text);
    row["help"] = std::string(o.help);
    row["note"] = std::string(o.note);
    py::list commands;
    py::list refused;
    for (const auto& entry : kRequestCommandNames.entries) {
      if ((o.commands & bit(entry.value)) != 0) commands.append(std::string(entry.name));
      if ((o.refused & bit(entry.value)) != 0) refused.append(std::string(entry.name));
    }
    row["commands"] = commands;
    row["refused"] = refused;
    row["refusal"] = std::string(o.refusal);
    py::list choices;
    if (o.choices != nullptr) {
      for (const std::string_view c : o.choices()) choices.append(std::string(c));
    }
    row["choices"] = choices;
    rows.append(row);
  }
  return rows;
}

// Raises the module's Error with the status's one line.
[[noreturn]] void raise(const py::module_& m, const Status& status) {
  const py::object error = m.attr("Error");
  PyErr_SetString(error.ptr(), status.to_string().c_str());
  throw py::error_already_set();
}

template <typename T>
T value_or_raise(const py::module_& m, Result<T> result) {
  if (!result.ok()) raise(m, result.status());
  return std::move(result).value();
}

// Runs `work` (no Python objects inside) with the GIL released.
template <typename F>
auto without_gil(F&& work) {
  py::gil_scoped_release release;
  return work();
}

}  // namespace
}  // namespace trainfit

PYBIND11_MODULE(_trainfit, m) {
  using namespace trainfit;
  m.doc() = "trainfit's library in process (use the trainfit package: trainfit.estimate, ...)";
  // api.py replaces it with trainfit.Error; a ValueError either way.
  m.attr("Error") = py::reinterpret_borrow<py::object>(PyExc_ValueError);

  py::class_<TraceHandle>(m, "Trace", "A trace parsed and fitted once (trainfit.load_trace).")
      .def_property_readonly("model", [](const TraceHandle& t) { return t.model->trace.model; })
      .def_property_readonly("source", [](const TraceHandle& t) { return t.source; })
      .def_property_readonly("batches",
                             [](const TraceHandle& t) {
                               std::vector<int64_t> batches;
                               for (const TraceRun& r : t.model->trace.runs) {
                                 batches.push_back(r.batch);
                               }
                               return batches;
                             })
      .def("__repr__", [](const TraceHandle& t) {
        return fmt::format("<trainfit.Trace {} from {}>", t.model->trace.model, t.source);
      });

  m.def("request_options", &option_table,
        "The request options: key, flag, group, kind, default, help, note, commands, choices.");

  m.def(
      "load_trace",
      [m](const std::string& text, const std::string& source) {
        auto model = value_or_raise(m, without_gil([&] { return load_trace(text, source); }));
        return TraceHandle{std::move(model), source};
      },
      py::arg("text"), py::arg("source"),
      "Parses and fits a trace's JSON text; `source` names it in errors and command lines.");

  m.def(
      "estimate",
      [m](const py::dict& options, bool explain, bool timeline) {
        const TrainingRequest request =
            value_or_raise(m, request_of(options, RequestCommand::kEstimate));
        const EstimateReport report = value_or_raise(
            m, without_gil([&] {
              return make_estimate_report(request, {.timeline = timeline, .explain = explain});
            }));
        return py::make_tuple(estimate_json(report).dump(2),
                              timeline ? timeline_csv(report) : std::string());
      },
      py::arg("options"), py::arg("explain") = false, py::arg("timeline") = false,
      "(the `estimate --json` text, the timeline CSV or '') for one request.");

  m.def(
      "estimate_html",
      [m](const py::dict& options) {
        const TrainingRequest request =
            value_or_raise(m, request_of(options, RequestCommand::kEstimate));
        const EstimateReport report = value_or_raise(
            m, without_gil([&] {
              return make_estimate_report(request, {.timeline = true, .explain = true});
            }));
        return estimate_html(report);
      },
      py::arg("options"), "The `estimate --html` page for one request.");

  m.def(
      "fit",
      [m](py::dict options, bool what_if, int64_t target_batch, bool allow_model_changes,
          const std::string& rank, bool html) {
        FitRequest f;
        if (options.contains("gpu") && py::str(options["gpu"]).cast<std::string>() == "all") {
          f.all_gpus = true;
          PyDict_DelItemString(options.ptr(), "gpu");
        }
        f.batch_given = options.contains("batch");
        f.what_if = what_if;
        f.target_batch = target_batch;
        f.allow_model_changes = allow_model_changes;
        f.rank = value_or_raise(m, parse_enum(kRankNames, "rank", rank));
        f.curve = html;
        f.request = value_or_raise(m, request_of(options, RequestCommand::kFit));
        const FitReport report = value_or_raise(m, without_gil([&] { return make_fit_report(f); }));
        return html ? fit_html(report) : fit_json(report).dump(2);
      },
      py::arg("options"), py::arg("what_if") = false, py::arg("target_batch") = 0,
      py::arg("allow_model_changes") = false, py::arg("rank") = "memory", py::arg("html") = false,
      "The `fit --json` text for one request; with html, the `fit --html` page.");

  m.def(
      "launch",
      [m](const py::dict& options, int cores) {
        const TrainingRequest request =
            value_or_raise(m, request_of(options, RequestCommand::kLaunch));
        if (cores < 1) {
          raise(m, invalid_argument("cores must be at least 1", "for example cores=32"));
        }
        const LaunchReport report = value_or_raise(
            m, without_gil([&] {
              return make_launch_report(request, {.max_gpus = request.gpus, .host_cores = cores});
            }));
        return launch_json(report).dump(2);
      },
      py::arg("options"), py::arg("cores") = 1,
      "The `launch --json` text for one request (gpus: the GPUs available).");

  m.def(
      "compare",
      [m](const std::vector<py::dict>& models) {
        std::vector<TrainingRequest> requests;
        for (size_t i = 0; i < models.size(); ++i) {
          Result<TrainingRequest> r = request_of(models[i], RequestCommand::kCompare);
          if (!r.ok()) raise(m, r.status().with_context(fmt::format("model {}", i + 1)));
          requests.push_back(std::move(*r));
        }
        const std::vector<CompareEntry> entries =
            value_or_raise(m, without_gil([&] { return make_compare_report(requests); }));
        return compare_json(entries).dump(2);
      },
      py::arg("models"), "The `compare --json` text for two or more requests.");

  m.def(
      "summary",
      [m](const py::dict& options, int depth, bool html) {
        const TrainingRequest request =
            value_or_raise(m, request_of(options, RequestCommand::kSummary));
        const Summary s = value_or_raise(m, without_gil([&] { return make_summary(request); }));
        return html ? summary_html(s, depth) : summary_json(s, depth).dump(2);
      },
      py::arg("options"), py::arg("depth") = -1, py::arg("html") = false,
      "The `summary --json` text for a zoo model or a trace; with html, the `summary --html` "
      "page.");
}
