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

// The keywords a request takes, as api.py names them.
const std::vector<std::string> kRequestKeys = {"model",
                                               "trace",
                                               "set",
                                               "batch",
                                               "input",
                                               "seq_len",
                                               "precision",
                                               "device_profile",
                                               "freeze",
                                               "hf_config",
                                               "lora",
                                               "optimizer",
                                               "optimizer_impl",
                                               "default_device",
                                               "weight_decay",
                                               "checkpoint",
                                               "checkpoint_reentrant",
                                               "grad_accum",
                                               "grad_scaler_skips",
                                               "cudnn_benchmark",
                                               "loop",
                                               "gpus",
                                               "strategy",
                                               "fsdp_wrap",
                                               "fsdp_sharding",
                                               "fsdp_mixed_precision",
                                               "bucket_cap_mb",
                                               "gradient_as_bucket_view",
                                               "find_unused_parameters",
                                               "broadcast_buffers",
                                               "tf32",
                                               "memory_format",
                                               "dataset_size",
                                               "baseline_batch",
                                               "baseline_lr",
                                               "gpu",
                                               "gpu_memory",
                                               "gpu_profile",
                                               "cuda_context",
                                               "margin",
                                               "expandable_segments",
                                               "max_split_size"};

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

Status unknown_key(const std::string& key) {
  const std::string guess = closest(key, kRequestKeys);
  return invalid_argument(
      fmt::format("unknown option '{}'", key),
      guess.empty() ? "see help(trainfit.estimate)" : fmt::format("did you mean '{}'?", guess));
}

// api.py reads the files it is given: (path, text).
Result<std::pair<std::string, std::string>> file_of(const std::string& key, const py::handle& v,
                                                    std::string_view what) {
  if (!py::isinstance<py::tuple>(v) || py::len(v) != 2 ||
      !py::isinstance<py::str>(v.cast<py::tuple>()[0]) ||
      !py::isinstance<py::str>(v.cast<py::tuple>()[1])) {
    return wrong_type(key, v, what);
  }
  return v.cast<std::pair<std::string, std::string>>();
}

// Keywords (None already dropped by api.py) as a request; the library checks the rest.
Result<TrainingRequest> request_of(const py::dict& options) {
  TrainingRequest r;
  DeviceChoice device;
  std::optional<std::pair<HfModel, std::string>> hf;  // applied once the model keys are read
  for (const auto& [k, v] : options) {
    const std::string key = py::str(k);
    if (key == "model") {
      TF_ASSIGN_OR_RETURN(r.model, text_of(key, v));
    } else if (key == "trace") {
      if (!py::isinstance<TraceHandle>(v)) return wrong_type(key, v, "trainfit.load_trace(...)");
      const auto& handle = v.cast<const TraceHandle&>();
      r.trace = handle.model;
      r.trace_source = handle.source;
    } else if (key == "set") {
      if (!py::isinstance<py::dict>(v)) return wrong_type(key, v, "a dict such as {\"k\": 1}");
      for (const auto& [sk, sv] : v.cast<py::dict>()) {
        r.sets.emplace_back(py::str(sk), py::str(sv));
      }
    } else if (key == "batch") {
      TF_ASSIGN_OR_RETURN(r.batch, int_of(key, v));
    } else if (key == "input") {
      TF_ASSIGN_OR_RETURN(r.input, dims_of(key, v));
    } else if (key == "seq_len") {
      TF_ASSIGN_OR_RETURN(r.seq_len, int_of(key, v));
    } else if (key == "precision") {
      TF_ASSIGN_OR_RETURN(const std::string s, text_of(key, v));
      TF_ASSIGN_OR_RETURN(r.precision, parse_enum(kPrecisionNames, key, s));
    } else if (key == "device_profile") {
      TF_ASSIGN_OR_RETURN(const std::string s, text_of(key, v));
      TF_ASSIGN_OR_RETURN(device.profile, parse_enum(kDeviceNames, key, s));
    } else if (key == "freeze") {
      TF_ASSIGN_OR_RETURN(r.freeze, strings_of(key, v));
    } else if (key == "hf_config") {
      TF_ASSIGN_OR_RETURN(const auto file, file_of(key, v, "a config.json's path"));
      TF_ASSIGN_OR_RETURN(HfModel model, parse_hf_config(file.second, file.first));
      hf.emplace(std::move(model), file.first);
    } else if (key == "lora") {
      // api.py spells a dict as the command line does.
      TF_ASSIGN_OR_RETURN(const std::string s, text_of(key, v));
      TF_ASSIGN_OR_RETURN(r.lora, parse_lora(s));
    } else if (key == "optimizer") {
      TF_ASSIGN_OR_RETURN(const std::string s, text_of(key, v));
      TF_ASSIGN_OR_RETURN(r.optimizer, parse_enum(kOptimizerNames, key, s));
    } else if (key == "optimizer_impl") {
      TF_ASSIGN_OR_RETURN(const std::string s, text_of(key, v));
      TF_ASSIGN_OR_RETURN(r.optimizer_impl, parse_enum(kOptimizerImplNames, key, s));
    } else if (key == "default_device") {
      TF_ASSIGN_OR_RETURN(const std::string s, text_of(key, v));
      if (s != "cpu" && s != "cuda") {
        return invalid_argument(fmt::format("default_device {} is not a device", s),
                                "give \"cpu\" or \"cuda\"");
      }
      r.cuda_default_device = s == "cuda";
    } else if (key == "weight_decay") {
      if (!py::isinstance<py::float_>(v) && !py::isinstance<py::int_>(v)) {
        return wrong_type(key, v, "a number");
      }
      r.weight_decay = v.cast<double>();
    } else if (key == "checkpoint") {
      TF_ASSIGN_OR_RETURN(r.checkpoint, strings_of(key, v));
    } else if (key == "grad_accum") {
      TF_ASSIGN_OR_RETURN(const int64_t n, int_of(key, v));
      if (n < 1) {
        return invalid_argument("grad_accum must be at least 1", "use grad_accum=1 or more");
      }
      if (n > std::numeric_limits<int>::max()) {
        return out_of_range(fmt::format("grad_accum {} is too large", n),
                            "every micro-batch is replayed: a few thousand at most");
      }
      r.grad_accum = static_cast<int>(n);
    } else if (key == "grad_scaler_skips") {
      TF_ASSIGN_OR_RETURN(const int64_t n, int_of(key, v));
      if (n < 0 || n > 1000000) {
        return invalid_argument("grad_scaler_skips must be between 0 and 1000000",
                                "for example grad_scaler_skips=2");
      }
      r.grad_scaler_skips = static_cast<int>(n);
    } else if (key == "gpus") {
      TF_ASSIGN_OR_RETURN(const int64_t n, int_of(key, v));
      if (n < 1 || n > 1 << 20) {
        return invalid_argument("gpus must be at least 1", "for example gpus=2");
      }
      r.gpus = static_cast<int>(n);
    } else if (key == "nodes") {
      TF_ASSIGN_OR_RETURN(const int64_t n, int_of(key, v));
      if (n < 1 || n > 1 << 20) {
        return invalid_argument("nodes must be at least 1", "for example nodes=2");
      }
      r.nodes = static_cast<int>(n);
    } else if (key == "network") {
      if (!v.is_none()) {
        if (!py::isinstance<py::float_>(v) && !py::isinstance<py::int_>(v)) {
          return wrong_type(key, v, "a number of Gbit/s such as 200");
        }
        r.network_gbits = v.cast<double>();
      }
    } else if (key == "strategy") {
      if (!v.is_none()) {
        TF_ASSIGN_OR_RETURN(const std::string s, text_of(key, v));
        TF_ASSIGN_OR_RETURN(r.strategy, parse_enum(kStrategyNames, key, s));
      }
    } else if (key == "fsdp_wrap") {
      TF_ASSIGN_OR_RETURN(r.fsdp.wrap, strings_of(key, v));
    } else if (key == "fsdp_sharding") {
      if (!v.is_none()) {
        TF_ASSIGN_OR_RETURN(const std::string s, text_of(key, v));
        TF_ASSIGN_OR_RETURN(r.fsdp.sharding, parse_enum(kFsdpShardingNames, key, s));
      }
    } else if (key == "fsdp_mixed_precision") {
      if (!v.is_none()) {
        TF_ASSIGN_OR_RETURN(const std::string s, text_of(key, v));
        TF_ASSIGN_OR_RETURN(r.fsdp.mixed_precision_bf16, parse_fsdp_mixed_precision(key, s));
      }
    } else if (key == "bucket_cap_mb") {
      if (!v.is_none()) {
        if (!py::isinstance<py::float_>(v) && !py::isinstance<py::int_>(v)) {
          return wrong_type(key, v, "a number of MiB such as 25");
        }
        const double mb = v.cast<double>();
        if (!(mb > 0 && mb < 1e9)) {
          return invalid_argument("bucket_cap_mb must be more than 0", "DDP's default is 25");
        }
        r.ddp.bucket_cap_bytes = static_cast<int64_t>(mb * 1024 * 1024);
      }
    } else if (key == "gradient_as_bucket_view" || key == "find_unused_parameters" ||
               key == "broadcast_buffers") {
      if (!py::isinstance<py::bool_>(v)) return wrong_type(key, v, "True or False");
      const bool on = v.cast<bool>();
      if (key == "gradient_as_bucket_view") r.ddp.gradient_as_bucket_view = on;
      if (key == "find_unused_parameters") r.ddp.find_unused_parameters = on;
      if (key == "broadcast_buffers") r.ddp.broadcast_buffers = on;
    } else if (key == "tf32" || key == "checkpoint_reentrant" || key == "cudnn_benchmark") {
      if (!py::isinstance<py::bool_>(v)) return wrong_type(key, v, "True or False");
      if (key == "tf32") r.tf32 = v.cast<bool>();
      if (key == "checkpoint_reentrant") r.checkpoint_reentrant = v.cast<bool>();
      if (key == "cudnn_benchmark") r.cudnn_benchmark = v.cast<bool>();
    } else if (key == "loop") {
      TF_ASSIGN_OR_RETURN(const std::string s, text_of(key, v));
      TF_ASSIGN_OR_RETURN(r.loop, parse_enum(kLoopStyleNames, key, s));
    } else if (key == "memory_format") {
      TF_ASSIGN_OR_RETURN(const std::string s, text_of(key, v));
      TF_ASSIGN_OR_RETURN(r.memory_format, parse_enum(kMemoryFormatNames, key, s));
    } else if (key == "dataset_size") {
      TF_ASSIGN_OR_RETURN(r.dataset_size, int_of(key, v));
    } else if (key == "baseline_batch") {
      if (!v.is_none()) {
        TF_ASSIGN_OR_RETURN(r.baseline_batch, int_of(key, v));
      }
    } else if (key == "baseline_lr") {
      if (!v.is_none()) {
        if (!py::isinstance<py::float_>(v) && !py::isinstance<py::int_>(v)) {
          return wrong_type(key, v, "a number such as 0.1");
        }
        r.baseline_lr = v.cast<double>();
      }
    } else if (key == "link") {
      TF_ASSIGN_OR_RETURN(const std::string s, text_of(key, v));
      TF_ASSIGN_OR_RETURN(device.link, parse_enum(kLinkNames, key, s));
    } else if (key == "bus_bandwidth") {
      if (!py::isinstance<py::float_>(v) && !py::isinstance<py::int_>(v)) {
        return wrong_type(key, v, "a number of GB/s such as 20");
      }
      device.bus_gbps = v.cast<double>();
    } else if (key == "gpu") {
      TF_ASSIGN_OR_RETURN(device.gpu, text_of(key, v));
    } else if (key == "gpu_memory") {
      TF_ASSIGN_OR_RETURN(device.gpu_memory_bytes, size_of(key, v));
    } else if (key == "gpu_profile") {
      TF_ASSIGN_OR_RETURN(const auto file, file_of(key, v, "a GPU profile's path"));
      TF_ASSIGN_OR_RETURN(GpuProfile profile, parse_gpu_profile(file.second, file.first));
      device.gpu_profile = std::make_shared<const GpuProfile>(std::move(profile));
    } else if (key == "cuda_context") {
      TF_ASSIGN_OR_RETURN(device.cuda_context_bytes, size_of(key, v));
    } else if (key == "margin") {
      if (py::isinstance<py::str>(v)) {
        TF_ASSIGN_OR_RETURN(r.margin, parse_margin(key, v.cast<std::string>()));
      } else if (py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v)) {
        r.margin = v.cast<double>();
      } else {
        return wrong_type(key, v, "a fraction such as 0.05, or \"5%\"");
      }
    } else if (key == "expandable_segments") {
      if (!py::isinstance<py::bool_>(v)) return wrong_type(key, v, "True or False");
      r.expandable_segments = v.cast<bool>();
    } else if (key == "max_split_size") {
      TF_ASSIGN_OR_RETURN(r.max_split_size_bytes, size_of(key, v));
    } else {
      return unknown_key(key);
    }
  }
  if (hf) TF_RETURN_IF_ERROR(use_hf_config(r, std::move(hf->first), std::move(hf->second)));
  TF_ASSIGN_OR_RETURN(r.device, choose_device(device));
  return r;
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
        const TrainingRequest request = value_or_raise(m, request_of(options));
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
        const TrainingRequest request = value_or_raise(m, request_of(options));
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
        f.request = value_or_raise(m, request_of(options));
        const FitReport report = value_or_raise(m, without_gil([&] { return make_fit_report(f); }));
        return html ? fit_html(report) : fit_json(report).dump(2);
      },
      py::arg("options"), py::arg("what_if") = false, py::arg("target_batch") = 0,
      py::arg("allow_model_changes") = false, py::arg("rank") = "memory", py::arg("html") = false,
      "The `fit --json` text for one request; with html, the `fit --html` page.");

  m.def(
      "launch",
      [m](const py::dict& options, int cores) {
        const TrainingRequest request = value_or_raise(m, request_of(options));
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
          Result<TrainingRequest> r = request_of(models[i]);
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
        const TrainingRequest request = value_or_raise(m, request_of(options));
        const Summary s = value_or_raise(m, without_gil([&] { return make_summary(request); }));
        return html ? summary_html(s, depth) : summary_json(s, depth).dump(2);
      },
      py::arg("options"), py::arg("depth") = -1, py::arg("html") = false,
      "The `summary --json` text for a zoo model or a trace; with html, the `summary --html` "
      "page.");
}
