// What the host-side commands read, behind one small interface, so that tests run them against
// recorded fixture trees instead of this machine.
//
//   HostFs fs("/");                                  // this machine
//   HostFs fixture("tests/data/host/intel_hybrid");  // a recorded tree
//   std::optional<std::string> gov =
//       fs.read_line("/sys/devices/system/cpu/cpufreq/policy0/scaling_governor");
//
// Every path is absolute as seen on the host ("/sys/...", "/proc/...", "/dev/...") and is read
// under the root. Nothing here writes. A file that is missing or unreadable is `nullopt`:
// absence is information (a VM has no cpufreq), never an error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainfit {

struct FsSpace {
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};

class HostFs {
 public:
  explicit HostFs(const std::string& root = "/");

  const std::string& root() const { return root_; }
  bool is_live() const { return root_ == "/"; }  // this machine, not a recorded tree

  // The whole file (at most 1 MiB), or nullopt when missing or unreadable.
  std::optional<std::string> read(std::string_view path) const;
  // The first line without its newline and surrounding blanks.
  std::optional<std::string> read_line(std::string_view path) const;
  // The first line as an integer; nullopt when missing or not a number.
  std::optional<int64_t> read_int(std::string_view path) const;
  // Names in a directory, sorted; empty when missing.
  std::vector<std::string> list(std::string_view dir) const;
  bool exists(std::string_view path) const;
  // Size and free space of the file system at `path`. Live: statvfs. A recorded tree keeps
  // what statvfs said in "<root>/statvfs", one "PATH TOTAL_BYTES FREE_BYTES" per line.
  std::optional<FsSpace> space(std::string_view path) const;

 private:
  std::string under_root(std::string_view path) const;
  std::string root_;
};

// A decimal integer with optional surrounding blanks; nullopt otherwise.
std::optional<int64_t> parse_int(std::string_view text);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; nullopt when malformed.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);
// The inverse, with ranges: {0,1,2,3,8} -> "0-3,8"; "" for none.
std::string format_cpu_list(const std::vector<int>& cpus);

}  // namespace trainfit
