#include "report/table.h"

#include <algorithm>

#include "base/check.h"

namespace trainfit {
namespace {

constexpr size_t kMinFlexible = 8;

std::string fit(const std::string& text, size_t width, Align align) {
  std::string cell = text;
  if (cell.size() > width)
    cell = width <= 2 ? cell.substr(0, width) : cell.substr(0, width - 2) + "..";
  const std::string pad(width - std::min(width, cell.size()), ' ');
  return align == Align::kLeft ? cell + pad : pad + cell;
}

}  // namespace

void TextTable::add_row(std::vector<std::string> cells) {
  TF_CHECK(cells.size() == columns_.size()) << "row has " << cells.size() << " cells";
  rows_.push_back(std::move(cells));
}

std::string TextTable::render(size_t width) const {
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    widths[c] = columns_[c].header.size();
    for (const auto& row : rows_) widths[c] = std::max(widths[c], row[c].size());
  }
  auto total = [&] {
    size_t t = widths.empty() ? 0 : widths.size() - 1;
    for (size_t w : widths) t += w;
    return t;
  };
  // Shrink the widest flexible column one step at a time until the table fits.
  while (total() > width) {
    size_t widest = columns_.size();
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (!columns_[c].flexible || widths[c] <= kMinFlexible) continue;
      if (widest == columns_.size() || widths[c] > widths[widest]) widest = c;
    }
    if (widest == columns_.size()) break;
    --widths[widest];
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) line += ' ';
      line += fit(cells[c], widths[c], columns_[c].align);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + '\n';
  };
  std::vector<std::string> header;
  for (const Column& c : columns_) header.push_back(c.header);
  emit(header);
  for (const auto& row : rows_) emit(row);
  return out;
}

}  // namespace trainfit
