// trainfit monitor: one row per GPU per interval, like `nvidia-smi dmon -s pucm`, with the CPU
// clock, CPU utilization and RAM beside it; at the end, whether a GPU kept dropping to idle while
// a process trained on it (a starved data loader) and what to try.
#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/host_options.h"
#include "host/doctor_report.h"
#include "host/host_info.h"
#include "host/monitor.h"

namespace trainfit {
namespace {

struct MonitorOptions {
  HostOptions host;
  double interval_s = 1.0;
  double seconds = 0;  // 0: until Ctrl-C
  bool csv = false;
  bool json = false;
};

constexpr double kMinIntervalS = 0.01;
constexpr double kMaxIntervalS = 3600;
constexpr double kMaxSeconds = 7 * 24 * 3600;
constexpr double kBytesPerMiB = 1 << 20;
constexpr double kBytesPerGiB = 1 << 30;

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int /*signal*/) {
  g_interrupted.store(true);
}

template <typename T>
std::string cell(const std::optional<T>& v, const char* spec = "{}") {
  return v ? fmt::format(fmt::runtime(spec), *v) : std::string("-");
}

struct Row {
  std::vector<std::string> cells;
};

const std::vector<std::string>& gpu_columns() {
  static const std::vector<std::string> kColumns = {"gpu",   "sm%",  "mem%",   "pwr_W", "temp_C",
                                                    "smclk", "mclk", "fb_MiB", "procs"};
  return kColumns;
}
const std::vector<std::string>& cpu_columns() {
  static const std::vector<std::string> kColumns = {"cpu_MHz", "cpu%", "ram_GiB"};
  return kColumns;
}

std::vector<Row> rows_of(const MonitorSample& s) {
  std::vector<std::string> cpu = {
      cell(s.cpu_mhz, "{:.0f}"), cell(s.cpu_util_pct, "{:.0f}"),
      s.ram_used_bytes
          ? fmt::format("{:.1f}", static_cast<double>(*s.ram_used_bytes) / kBytesPerGiB)
          : std::string("-")};
  std::vector<Row> rows;
  const std::string time = fmt::format("{:.1f}", s.t_s);
  if (s.gpus.empty()) {
    Row r{{time}};
    r.cells.insert(r.cells.end(), cpu.begin(), cpu.end());
    rows.push_back(std::move(r));
  }
  for (const GpuStatus& g : s.gpus) {
    std::optional<double> fb;
    if (g.memory_used_bytes) fb = static_cast<double>(*g.memory_used_bytes) / kBytesPerMiB;
    Row r{{time, fmt::format("{}", g.index), cell(g.util_gpu_pct), cell(g.util_mem_pct),
           cell(g.power_w, "{:.0f}"), cell(g.temperature_c), cell(g.sm_mhz), cell(g.mem_mhz),
           cell(fb, "{:.0f}"), fmt::format("{}", g.processes.size())}};
    r.cells.insert(r.cells.end(), cpu.begin(), cpu.end());
    rows.push_back(std::move(r));
  }
  return rows;
}

std::vector<std::string> header(bool with_gpu) {
  std::vector<std::string> h = {"time_s"};
  if (with_gpu) h.insert(h.end(), gpu_columns().begin(), gpu_columns().end());
  h.insert(h.end(), cpu_columns().begin(), cpu_columns().end());
  return h;
}

std::string text_line(const std::vector<std::string>& cells) {
  std::string line;
  for (const std::string& c : cells) line += fmt::format("{:>8}", c);
  return line + '\n';
}

std::string csv_line(const std::vector<std::string>& cells) {
  std::string line;
  for (const std::string& c : cells) line += (line.empty() ? "" : ",") + (c == "-" ? "" : c);
  return line + '\n';
}

nlohmann::json sample_json(const MonitorSample& s) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuStatus& g : s.gpus) {
    gpus.push_back({{"index", g.index},
                    {"util_gpu_pct", json_or_null(g.util_gpu_pct)},
                    {"util_mem_pct", json_or_null(g.util_mem_pct)},
                    {"power_w", json_or_null(g.power_w)},
                    {"temperature_c", json_or_null(g.temperature_c)},
                    {"sm_mhz", json_or_null(g.sm_mhz)},
                    {"mem_mhz", json_or_null(g.mem_mhz)},
                    {"memory_used_bytes", json_or_null(g.memory_used_bytes)},
                    {"processes", g.processes.size()}});
  }
  return {{"t_s", s.t_s},
          {"gpus", gpus},
          {"cpu_mhz", json_or_null(s.cpu_mhz)},
          {"cpu_util_pct", json_or_null(s.cpu_util_pct)},
          {"ram_used_bytes", json_or_null(s.ram_used_bytes)},
          {"ram_total_bytes", json_or_null(s.ram_total_bytes)}};
}

int run_monitor_command(const MonitorOptions& o, std::ostream& out, std::ostream& err) {
  if (!(o.interval_s >= kMinIntervalS && o.interval_s <= kMaxIntervalS)) {
    return report_error(
        err, invalid_argument(fmt::format("--interval {:g}: must be between {:g} and {:g} s",
                                          o.interval_s, kMinIntervalS, kMaxIntervalS),
                              "NVML averages utilization over 1/6 to 1 s; --interval 1 is usual"));
  }
  if (!(o.seconds >= 0 && o.seconds <= kMaxSeconds)) {
    return report_error(err,
                        invalid_argument(fmt::format("--seconds {:g}: out of range", o.seconds),
                                         "leave it out to run until Ctrl-C"));
  }
  if (o.csv && o.json) {
    return report_error(
        err, invalid_argument("--csv and --json cannot be combined", "pick one output format"));
  }
  Result<HostFs> fs = host_fs(o.host);
  if (!fs.ok()) return report_error(err, fs.status());
  NvmlOpen nvml = Nvml::open(o.host.nvml);
  const bool with_gpu = nvml.nvml && nvml.nvml->device_count() > 0;
  MonitorSampler sampler(*fs, nvml.nvml.get());
  MonotonicClock clock;

  if (!o.json) {
    const std::string gpu_note =
        with_gpu ? fmt::format("{} GPU(s), NVIDIA driver {}", nvml.nvml->device_count(),
                               nvml.nvml->driver_version())
                 : fmt::format("GPU: not available ({}); CPU columns only",
                               nvml.nvml ? "NVML reports no GPU" : nvml.error);
    const std::string until = o.seconds > 0 ? fmt::format("for {:g} s", o.seconds) : "until Ctrl-C";
    if (o.csv) {
      err << fmt::format("monitor: every {:g} s {}; {}\n", o.interval_s, until, gpu_note);
      out << csv_line(header(with_gpu));
    } else {
      out << fmt::format("# every {:g} s {}; {}\n", o.interval_s, until, gpu_note);
      std::string h = text_line(header(with_gpu));
      h[0] = '#';
      out << h;
    }
    out.flush();
  }
  g_interrupted.store(false);
  using Handler = void (*)(int);
  Handler previous = o.seconds > 0 ? nullptr : std::signal(SIGINT, on_interrupt);
  const std::vector<MonitorSample> samples = run_monitor(
      sampler, clock, static_cast<int64_t>(o.interval_s * kNsPerSecond),
      static_cast<int64_t>(o.seconds * kNsPerSecond), g_interrupted, [&](const MonitorSample& s) {
        if (o.json) return;
        for (const Row& r : rows_of(s)) out << (o.csv ? csv_line(r.cells) : text_line(r.cells));
        out.flush();
      });
  if (o.seconds == 0) std::signal(SIGINT, previous);

  const std::vector<Finding> findings = judge_monitor(samples, sampler.online().size());
  if (o.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const MonitorSample& s : samples) rows.push_back(sample_json(s));
    out << json_text(nlohmann::json{
               {"interval_s", o.interval_s},
               {"gpu_available", with_gpu},
               {"gpu_error", with_gpu ? nlohmann::json(nullptr) : nlohmann::json(nvml.error)},
               {"samples", rows},
               {"findings", findings_json(findings)}})
        << '\n';
    return kExitOk;
  }
  std::ostream& notes = o.csv ? err : out;
  if (with_gpu && findings.empty()) {
    notes << fmt::format("# {} samples: no GPU dropped to idle at a steady rhythm\n",
                         samples.size());
  }
  notes << findings_text(findings, "# ");
  return kExitOk;
}

}  // namespace

CommandRun setup_monitor(CLI::App& app) {
  auto o = std::make_shared<MonitorOptions>();
  app.footer(
      "Columns: sm% and mem% are NVML's utilization (time a kernel ran / memory was busy over\n"
      "its sample period), pwr_W board power, smclk and mclk clocks in MHz, fb_MiB memory used,\n"
      "procs compute processes; cpu_MHz the mean CPU clock, cpu% CPU utilization, ram_GiB RAM\n"
      "in use. At the end it says whether a GPU dropped to idle at a steady rhythm while a\n"
      "process trained on it, which means the data loader cannot keep up.\n\n"
      "Examples:\n"
      "  trainfit monitor                       # every second until Ctrl-C\n"
      "  trainfit monitor --seconds 60 --csv > run.csv\n"
      "  trainfit monitor --interval 0.5 --seconds 30 --json");
  add_host_options(app, o->host);
  app.add_option("--interval", o->interval_s, "seconds between rows (default 1)");
  app.add_option("--seconds", o->seconds, "stop after this long (default: until Ctrl-C)");
  app.add_flag("--csv", o->csv, "comma-separated rows with a header (notes go to stderr)");
  app.add_flag("--json", o->json, "one JSON object with every sample and the findings, at the end");
  return [o](std::ostream& out, std::ostream& err) { return run_monitor_command(*o, out, err); };
}

}  // namespace trainfit
