// Small statistics shared by the analysis and the training telemetry.
#pragma once

#include <algorithm>
#include <vector>

#include "common/error.h"

namespace ss {

// The median of v (reordered in place), with numpy.median's semantics: the mean of the two middle
// values for an even count (the reference implementation uses numpy; this matters for short inputs).
template <typename T>
double Median(std::vector<T>& v) {
  SS_ASSERT(!v.empty());
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + mid);
  return 0.5 * (lower + upper);
}

}  // namespace ss
