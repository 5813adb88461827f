#include <fmt/format.h>

#include <string>

#include "report/loader_report.h"
#include "report/table.h"
#include "report/text.h"

namespace trainfit {
namespace {

std::string python_bool(bool b) {
  return b ? "True" : "False";
}

std::string cores_phrase(const LoaderPlan& plan, const LoaderProfile& p) {
  const auto probed = static_cast<int64_t>(p.host.affinity.size());
  const std::string where =
      plan.usable_cores == probed || (p.host.cgroup_cpu_quota && plan.usable_cores < probed)
          ? fmt::format("{} physical", p.host.physical_cores)
          : fmt::format("the probe ran on {}", probed);
  return fmt::format("{} usable core{} ({}, start method {})", plan.usable_cores,
                     plan.usable_cores == 1 ? "" : "s", where, p.host.start_method);
}

// Samples per second with three significant digits below 100.
std::string rate(double samples_per_s) {
  if (samples_per_s < 10) return fmt::format("{:.2f}", samples_per_s);
  if (samples_per_s < 100) return fmt::format("{:.1f}", samples_per_s);
  return fmt::format("{:.0f}", samples_per_s);
}

// The rows worth a line: the measured counts, powers of two, the cores and the chosen count.
bool shown(const WorkerPoint& w, const LoaderPlan& plan) {
  const int64_t n = w.num_workers;
  return w.measured || n == plan.num_workers || n == plan.usable_cores || (n & (n - 1)) == 0;
}

std::string ram_line(const LoaderMemory& m, int64_t workers, bool persistent) {
  std::string line = fmt::format("{} (PSS): main process {}", format_bytes(m.host_ram_bytes),
                                 format_bytes(m.main_bytes));
  if (workers > 0) {
    line += fmt::format(" + {} worker{} x {}", workers, workers == 1 ? "" : "s",
                        format_bytes(m.worker_own_bytes + m.worker_copy_bytes));
    if (m.worker_copy_bytes > 0) {
      line += fmt::format(" ({} copied{})", format_bytes(m.worker_copy_bytes),
                          persistent ? " by the end of the run" : " an epoch");
    }
    line += fmt::format(" + {} in /dev/shm", format_bytes(m.shm_bytes));
  } else {
    line += fmt::format(" + {} batch", format_bytes(m.batch_bytes));
  }
  if (m.pinned_bytes > 0) line += fmt::format(" + {} pinned", format_bytes(m.pinned_bytes));
  return line;
}

}  // namespace

std::string dataloader_call(const LoaderPlan& plan) {
  std::string call = fmt::format("DataLoader(dataset, batch_size={}, shuffle=True, num_workers={}",
                                 plan.batch, plan.num_workers);
  if (plan.prefetch_factor) call += fmt::format(", prefetch_factor={}", *plan.prefetch_factor);
  call += fmt::format(", pin_memory={}", python_bool(plan.pin_memory));
  if (plan.num_workers > 0) {
    call += fmt::format(", persistent_workers={}", python_bool(plan.persistent_workers));
  }
  return call + ")";
}

std::string loader_text(const LoaderReport& report) {
  const LoaderProfile& p = *report.profile;
  const LoaderPlan& plan = report.plan;
  const LoaderMemory& m = plan.memory;
  std::string out = fmt::format("DataLoader plan for {} ({} samples), batch {}, on {}\n", p.dataset,
                                format_count(p.length), plan.batch, cores_phrase(plan, p));
  out +=
      fmt::format("  GPU          {} a step ({}): {:.0f} samples/s to deliver\n",
                  format_duration(plan.step_time_s), plan.step_time_from, plan.gpu_samples_per_s);
  out += fmt::format("  {:<12} {}\n", plan.chosen ? "Use" : "Given", dataloader_call(plan));
  if (!plan.env.empty()) {
    std::string env;
    for (const auto& [name, value] : plan.env) env += fmt::format(" {}={}", name, value);
    out += fmt::format("  Environment {}\n", env);
  }
  out += fmt::format(
      "  Throughput   loader {} samples/s, GPU {}: {} the bottleneck; training gets {} "
      "samples/s{}\n",
      rate(plan.loader_samples_per_s), rate(plan.gpu_samples_per_s),
      plan.bottleneck == "gpu" ? "the GPU is" : "the loader is", rate(plan.samples_per_s),
      plan.epoch_s ? fmt::format(", {} an epoch", format_duration(*plan.epoch_s)) : "");
  if (plan.receive_s > 0) {
    out += fmt::format("               taking a batch from a worker costs the loop {}\n",
                       format_duration(plan.receive_s));
  }
  out += fmt::format("  Host RAM     {}\n", ram_line(m, plan.num_workers, plan.persistent_workers));
  if (m.host_ram_first_epoch_bytes != m.host_ram_bytes) {
    out += fmt::format("               {} after the first epoch\n",
                       format_bytes(m.host_ram_first_epoch_bytes));
  }
  std::string limits = fmt::format("/dev/shm {}", format_bytes(m.shm_bytes));
  if (p.host.shm_total_bytes)
    limits += fmt::format(" of {}", format_bytes(*p.host.shm_total_bytes));
  limits += fmt::format(", pinned {}, open files {}", format_bytes(m.pinned_bytes), m.open_fds);
  if (p.host.nofile_soft) limits += fmt::format(" of {}", *p.host.nofile_soft);
  limits += fmt::format(", maps {}", format_count(m.maps));
  if (p.host.max_map_count) limits += fmt::format(" of {}", format_count(*p.host.max_map_count));
  out += fmt::format("  Limits       {}\n\n", limits);

  TextTable t({{"workers", Align::kRight, false},
               {"samples/s", Align::kRight, false},
               {"", Align::kLeft, true}});
  for (const WorkerPoint& w : plan.curve) {
    if (!shown(w, plan)) continue;
    std::string note = w.measured ? "measured" : "estimated";
    if (w.num_workers == plan.num_workers) note += plan.chosen ? "   <- chosen" : "   <- given";
    t.add_row({std::to_string(w.num_workers), rate(w.samples_per_s), note});
  }
  out += t.render(100);
  if (plan.warnings.empty()) {
    out += "\nNo warnings: nothing in the profile's host limits ends this run.\n";
    return out;
  }
  out += "\nWarnings\n";
  for (const LoaderWarning& w : plan.warnings) {
    out += fmt::format("  [{}] {}\n      fix: {}\n", w.code, w.message, w.fix);
  }
  return out;
}

}  // namespace trainfit
