// trainfit latency: a fixed-rate loop at each --rate that sleeps to absolute deadlines and does
// the same CPU work every frame; reports wake-up lateness, work time and the CPU clock per rate,
// then compares the rates. Runs as an ordinary (SCHED_OTHER) process and holds no PM QoS
// request unless asked, so it sees what a Python control loop sees.
#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "host/doctor_report.h"
#include "host/host_info.h"
#include "host/latency.h"

namespace trainfit {
namespace {

struct LatencyOptions {
  std::vector<double> rates;
  double work_ms = 5.0;
  double seconds = 10.0;
  std::string cpus;
  bool hold_dma_latency = false;
  bool json = false;
};

constexpr double kMaxRateHz = 10000;
constexpr double kMaxSeconds = 3600;
constexpr double kMaxWorkMs = 10000;

// Holds a PM QoS request of 0 us for as long as it lives: idle states are then kept shallow.
class DmaLatencyHold {
 public:
  DmaLatencyHold() {
    fd_ = ::open("/dev/cpu_dma_latency", O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) {
      error_ = std::strerror(errno);
      return;
    }
    const int32_t zero = 0;
    if (::write(fd_, &zero, sizeof zero) != static_cast<ssize_t>(sizeof zero)) {
      error_ = std::strerror(errno);
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~DmaLatencyHold() {
    if (fd_ >= 0) ::close(fd_);
  }
  DmaLatencyHold(const DmaLatencyHold&) = delete;
  DmaLatencyHold& operator=(const DmaLatencyHold&) = delete;
  bool held() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  std::string error_;
};

Status validate(const LatencyOptions& o) {
  for (double r : o.rates) {
    if (!(r > 0 && r <= kMaxRateHz)) {
      return invalid_argument(
          fmt::format("--rate {:g}: must be above 0 and at most {:g} Hz", r, kMaxRateHz),
          "e.g. --rate 30 --rate 60");
    }
  }
  if (!(o.work_ms > 0 && o.work_ms <= kMaxWorkMs)) {
    return invalid_argument(
        fmt::format("--work-ms {:g}: must be above 0 and at most {:g}", o.work_ms, kMaxWorkMs),
        "the CPU work per frame in milliseconds, e.g. --work-ms 5");
  }
  if (!(o.seconds > 0 && o.seconds <= kMaxSeconds)) {
    return invalid_argument(
        fmt::format("--seconds {:g}: must be above 0 and at most {:g}", o.seconds, kMaxSeconds),
        "how long each rate runs, e.g. --seconds 10");
  }
  return {};
}

// Pins this thread to `list`; the CPUs must be ones this process may use.
Status pin(const std::string& list) {
  std::optional<std::vector<int>> cpus = parse_cpu_list(list);
  if (!cpus || cpus->empty()) {
    return invalid_argument(fmt::format("--cpus {}: not a CPU list", list),
                            "give CPUs like 2 or 0-3,8");
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  sched_getaffinity(0, sizeof allowed, &allowed);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : *cpus) {
    if (c >= CPU_SETSIZE || !CPU_ISSET(c, &allowed)) {
      return invalid_argument(
          fmt::format("--cpus {}: CPU {} is not available to this process", list, c),
          "see the online CPUs and this process's affinity in `trainfit doctor`");
    }
    CPU_SET(c, &set);
  }
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    return invalid_argument(fmt::format("--cpus {}: {}", list, std::strerror(errno)),
                            "give CPUs this process may use");
  }
  return {};
}

nlohmann::json percentiles_json(const Percentiles& p) {
  return {{"p50", p.p50}, {"p99", p.p99}, {"max", p.max}};
}

int run_latency(LatencyOptions o, std::ostream& out, std::ostream& err) {
  if (o.rates.empty()) o.rates = {30, 60};
  if (Status s = validate(o); !s.ok()) return report_error(err, s);
  if (!o.cpus.empty()) {
    if (Status s = pin(o.cpus); !s.ok()) return report_error(err, s);
  }
  const HostFs fs("/");
  const CpuInfo cpu = read_host_info(fs).cpu;
  std::unique_ptr<DmaLatencyHold> hold;
  if (o.hold_dma_latency) {
    hold = std::make_unique<DmaLatencyHold>();
    if (!hold->held()) {
      err << fmt::format(
          "trainfit: note: cannot hold /dev/cpu_dma_latency ({}); it needs root. "
          "Measuring without it.\n",
          hold->error());
    }
  }
  MonotonicClock clock;
  err << fmt::format("latency: sizing a {:g} ms work unit...\n", o.work_ms);
  const WorkUnit work = WorkUnit::calibrate(clock, o.work_ms);
  LoopHooks hooks;
  hooks.work = [&work] { work.run(); };
  hooks.cpu_mhz = [&fs]() -> std::optional<double> {
    const int c = sched_getcpu();
    return c < 0 ? std::nullopt : read_one_cpu_mhz(fs, c);
  };
  std::vector<RateResult> results;
  for (double rate : o.rates) {
    err << fmt::format("latency: {:g} Hz for {:g} s...\n", rate, o.seconds);
    results.push_back(run_rate(clock, rate, static_cast<int64_t>(o.seconds * kNsPerSecond), hooks));
  }
  const std::vector<Finding> verdict = judge_latency(results, cpu);
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> ran_on;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) ran_on.push_back(c);
    }
  }
  const bool held = hold && hold->held();
  if (o.json) {
    nlohmann::json rates = nlohmann::json::array();
    for (const RateResult& r : results) {
      rates.push_back({{"rate_hz", r.rate_hz},
                       {"frames", r.frames},
                       {"missed", r.missed},
                       {"lateness_us", percentiles_json(r.lateness_us)},
                       {"work_ms", percentiles_json(r.work_ms)},
                       {"cpu_mhz", json_or_null(r.cpu_mhz)}});
    }
    out << json_text(nlohmann::json{{"work_ms", o.work_ms},
                                    {"work_iterations", work.iterations()},
                                    {"seconds_per_rate", o.seconds},
                                    {"cpus", format_cpu_list(ran_on)},
                                    {"hold_dma_latency", held},
                                    {"governor", governor_summary(cpu)},
                                    {"rates", rates},
                                    {"verdict", findings_json(verdict)}})
        << '\n';
    return kExitOk;
  }
  out << fmt::format(
      "trainfit latency: {:g} ms of CPU work per frame, {:g} s per rate, on CPUs {} (SCHED_OTHER, "
      "{})\ncpufreq: {}\n\n",
      o.work_ms, o.seconds, format_cpu_list(ran_on),
      held ? "holding /dev/cpu_dma_latency at 0 us" : "no PM QoS request", governor_summary(cpu));
  out << fmt::format("{:>8} {:>7} {:>6}   {:^25}   {:^23}   {:>9}\n", "", "", "",
                     "wake-up late (us)", "work (ms)", "CPU MHz");
  out << fmt::format("{:>8} {:>7} {:>6}   {:>7} {:>8} {:>8}   {:>7} {:>7} {:>7}   {:>9}\n", "rate",
                     "frames", "missed", "p50", "p99", "max", "p50", "p99", "max", "working");
  for (const RateResult& r : results) {
    out << fmt::format(
        "{:>8} {:>7} {:>6}   {:>7.0f} {:>8.0f} {:>8.0f}   {:>7.2f} {:>7.2f} {:>7.2f}   {:>9}\n",
        fmt::format("{:g} Hz", r.rate_hz), r.frames, r.missed, r.lateness_us.p50, r.lateness_us.p99,
        r.lateness_us.max, r.work_ms.p50, r.work_ms.p99, r.work_ms.max,
        r.cpu_mhz ? fmt::format("{:.0f}", *r.cpu_mhz) : std::string("n/a"));
  }
  out << "\nverdict\n" << findings_text(verdict);
  return kExitOk;
}

}  // namespace

CommandRun setup_latency(CLI::App& app) {
  auto o = std::make_shared<LatencyOptions>();
  app.footer(
      "Each rate runs a loop that sleeps to an absolute deadline (clock_nanosleep on the\n"
      "monotonic clock), then runs the same fixed CPU work, sized at start to take --work-ms at\n"
      "full clock. Wake-up lateness shows idle-state and timer delays; work time and the CPU\n"
      "clock show frequency scaling. The classic symptom: the same work is slower at 30 Hz\n"
      "than at 60 Hz because the governor clocks down while the loop sleeps.\n\n"
      "Examples:\n"
      "  trainfit latency                                  # 30 and 60 Hz, 5 ms work, 10 s each\n"
      "  trainfit latency --rate 15 --rate 30 --rate 60 --cpus 2\n"
      "  sudo trainfit latency --hold-dma-latency          # C-states kept shallow: compare");
  app.add_option("--rate", o->rates, "loop rate in Hz; repeat to compare (default 30 and 60)");
  app.add_option("--work-ms", o->work_ms, "CPU work per frame at full clock, ms (default 5)");
  app.add_option("--seconds", o->seconds, "how long each rate runs (default 10)");
  app.add_option("--cpus", o->cpus, "pin the loop to these CPUs, e.g. 2 or 0-3");
  app.add_flag("--hold-dma-latency", o->hold_dma_latency,
               "hold /dev/cpu_dma_latency at 0 us during the run (root), as cyclictest does");
  app.add_flag("--json", o->json, "print one JSON object");
  return [o](std::ostream& out, std::ostream& err) { return run_latency(*o, out, err); };
}

}  // namespace trainfit
