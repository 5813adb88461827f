#include "host/host_fs.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace trainfit {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;

std::string_view trim(std::string_view s) {
  const auto not_blank = [](char c) { return c != ' ' && c != '\t' && c != '\n' && c != '\r'; };
  while (!s.empty() && !not_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && !not_blank(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<int64_t> parse_int(std::string_view s) {
  s = trim(s);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

HostFs::HostFs(const std::string& root) {
  // Without trailing slashes, so that root + "/sys/..." is one path; "" and "/" are this machine.
  const size_t last = root.find_last_not_of('/');
  root_ = last == std::string::npos ? std::string("/") : root.substr(0, last + 1);
}

std::string HostFs::under_root(std::string_view path) const {
  if (is_live()) return std::string(path);
  return root_ + std::string(path);
}

std::optional<std::string> HostFs::read(std::string_view path) const {
  std::ifstream in(under_root(path), std::ios::binary);
  if (!in) return std::nullopt;
  std::string text;
  char chunk[4096];
  while (text.size() < kMaxFileBytes && in.read(chunk, sizeof chunk).gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return std::nullopt;
  if (text.size() > kMaxFileBytes) text.resize(kMaxFileBytes);
  return text;
}

std::optional<std::string> HostFs::read_line(std::string_view path) const {
  std::optional<std::string> text = read(path);
  if (!text) return std::nullopt;
  std::string_view s = *text;
  s = s.substr(0, s.find('\n'));
  return std::string(trim(s));
}

std::optional<int64_t> HostFs::read_int(std::string_view path) const {
  std::optional<std::string> line = read_line(path);
  if (!line) return std::nullopt;
  return parse_int(*line);
}

std::vector<std::string> HostFs::list(std::string_view dir) const {
  std::vector<std::string> names;
  DIR* d = opendir(under_root(dir).c_str());
  if (d == nullptr) return names;
  while (const dirent* e = readdir(d)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool HostFs::exists(std::string_view path) const {
  struct stat st {};
  return ::stat(under_root(path).c_str(), &st) == 0;
}

std::optional<FsSpace> HostFs::space(std::string_view path) const {
  if (is_live()) {
    struct statvfs st {};
    if (::statvfs(std::string(path).c_str(), &st) != 0) return std::nullopt;
    const auto block = static_cast<int64_t>(st.f_frsize);
    return FsSpace{static_cast<int64_t>(st.f_blocks) * block,
                   static_cast<int64_t>(st.f_bavail) * block};
  }
  std::optional<std::string> table = read("/statvfs");
  if (!table) return std::nullopt;
  std::istringstream lines(*table);
  std::string where;
  std::string total;
  std::string free;
  while (lines >> where >> total >> free) {
    if (where != path) continue;
    std::optional<int64_t> t = parse_int(total);
    std::optional<int64_t> f = parse_int(free);
    if (!t || !f) return std::nullopt;
    return FsSpace{*t, *f};
  }
  return std::nullopt;
}

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  constexpr int kMaxCpu = 1 << 16;
  std::vector<int> cpus;
  text = trim(text);
  if (text.empty()) return cpus;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const size_t dash = item.find('-');
    std::optional<int64_t> lo = parse_int(item.substr(0, dash));
    std::optional<int64_t> hi =
        dash == std::string_view::npos ? lo : parse_int(item.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi >= kMaxCpu) return std::nullopt;
    for (int64_t c = *lo; c <= *hi; ++c) cpus.push_back(static_cast<int>(c));
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace trainfit
