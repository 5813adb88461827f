// Options the host-side commands share: where to read /sys and /proc from, and which NVML.
//
//   HostOptions o;  add_host_options(app, o);
//   Result<HostFs> fs = host_fs(o);     // "/" unless --root names a recorded tree
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"
#include "host/host_fs.h"

namespace trainfit {

struct HostOptions {
  std::string root = "/";
  std::string nvml;  // "" = libnvidia-ml.so.1
};

void add_host_options(CLI::App& app, HostOptions& o);
Result<HostFs> host_fs(const HostOptions& o);

}  // namespace trainfit
