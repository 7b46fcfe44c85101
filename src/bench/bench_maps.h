#pragma once
#include <string>

#include "bench/measure.h"

namespace aah {
// `aah bench maps --suite DIR`: the suite's time columns, measured side by side. For every regime of the suite's
// finished runs, its final window map (eval.json's window_map, of the regime's lowest seed) is timed on one model
// of the suite's shape (random weights: the cost does not depend on them): a training step (forward, backward,
// optimizer update) and an evaluation batch (forward only), the regimes interleaved round after round in one
// process (measure.h), with ratios to full windows taken per round. The controller's own cost is not in these
// figures (its decisions are not re-run; `aah bench train --regime` measures it).
// Output: text, or with --json one object (what DIR/timing.json holds, see the definition in bench_maps.cpp).
int bench_maps(const BenchOptions& o, const std::string& suite_dir);
}  // namespace aah
