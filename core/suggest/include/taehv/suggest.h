// "did you mean ...": the closest known names to a misspelt one, as ninja does for its tools.
#pragma once

#include <string>
#include <vector>

namespace taehv {

/// Edit distance (insert, delete, substitute: cost 1 each).
int editDistance(const std::string& a, const std::string& b);

/// The known names close to `typed` (edit distance <= max(2, size/3), or `typed` a prefix of it), nearest first.
std::vector<std::string> closestNames(const std::string& typed, const std::vector<std::string>& known);

/// " (did you mean 'x'?)", " (did you mean 'x' or 'y'?)", or "" when nothing is close.
std::string didYouMean(const std::string& typed, const std::vector<std::string>& known);

}  // namespace taehv
