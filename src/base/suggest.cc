#include "base/suggest.h"

#include <algorithm>

namespace trainfit {
namespace {

// Levenshtein distance: insertions, deletions and substitutions of one character.
size_t distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string closest(std::string_view word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::max<size_t>(3, word.size() / 3) + 1;
  for (const std::string& o : names) {
    const size_t d = distance(word, o);
    if (d < best_d) {
      best_d = d;
      best = o;
    }
  }
  return best;
}

}  // namespace trainfit
