// "Did you mean ...?" for a mistyped name: the closest of the known names by edit distance.
//
//   closest("resnt50", {"resnet18", "resnet50"}) == "resnet50"
//   closest("xyz", {"resnet50"}) == ""          // nothing close enough to suggest
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trainfit {

// The known name within max(3, a third of the word's length) edits, else "".
std::string closest(std::string_view word, const std::vector<std::string>& names);

}  // namespace trainfit
