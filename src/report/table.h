// A plain-text table that fits a terminal width by truncating its flexible columns.
//
//   TextTable t({{"Module", Align::kLeft, true}, {"Params", Align::kRight, false}});
//   t.add_row({"conv1", "9,408"});
//   std::string text = t.render(100);
#pragma once

#include <string>
#include <vector>

namespace trainfit {

enum class Align : uint8_t { kLeft, kRight };

struct Column {
  std::string header;
  Align align = Align::kLeft;
  bool flexible = false;  // may be truncated to fit the width
};

class TextTable {
 public:
  explicit TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void add_row(std::vector<std::string> cells);
  // Renders with one space between columns, at most `width` characters per line when the
  // flexible columns can shrink that far.
  std::string render(size_t width) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace trainfit
