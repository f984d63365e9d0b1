// Order statistics over samples: percentiles, never means alone.
#pragma once

#include <cstdint>
#include <vector>

namespace outboard::stats {

struct Summary {
  uint64_t count = 0;
  double min = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;
};

/// Nearest-rank percentile of `sorted` (ascending), q in [0, 1].
double percentile(const std::vector<double>& sorted, double q);
/// Sorts a copy of `samples` and summarises it.
Summary summarize(std::vector<double> samples);

}  // namespace outboard::stats
