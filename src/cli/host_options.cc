#include "cli/host_options.h"

#include <fmt/format.h>
#include <sys/stat.h>

namespace trainfit {

void add_host_options(CLI::App& app, HostOptions& o) {
  app.add_option("--root", o.root,
                 "read /sys, /proc, /dev and /etc under this directory (a recorded tree) "
                 "instead of this machine");
  app.add_option("--nvml", o.nvml, "NVML library to load (default libnvidia-ml.so.1)");
}

Result<HostFs> host_fs(const HostOptions& o) {
  struct stat st {};
  if (o.root.empty() || ::stat(o.root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return invalid_argument(fmt::format("--root {}: not a directory", o.root),
                            "give a directory that holds sys/ and proc/, or leave --root out");
  }
  return HostFs(o.root);
}

}  // namespace trainfit
