// libFuzzer target: the run files `aah report` reads back: metrics.jsonl (one JSON object per line) and eval.json.
#include <cstdio>
#include <cstdlib>

#include "experiments/report.h"
#include "fuzz_common.h"
#include "core/files.h"

using namespace aah;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = fuzz::bytes_of(data, size);
  fuzz::accepts([&] {
    const auto lines = report_parse_metrics(text, "fuzz/metrics.jsonl");
    for (const auto& line : lines) {
      // What the report then reads without further checks.
      AAH_FUZZ_ASSERT(line["step"].is_number_integer() && line["tokens_per_s"].is_number());
      (void)line["attn_work_ratio"].get<double>();
    }
    // Time to loss: the last line has val_loss, so the curve ends there.
    const std::vector<LossAtTime> curve = report_loss_by_time(lines);
    AAH_FUZZ_ASSERT(!curve.empty() && curve.back().step == lines.back()["step"].get<int>());
    (void)report_time_to_loss(curve, curve.back().loss);
  });
  fuzz::accepts([&] {
    const nlohmann::json e = parse_json(text, "fuzz/eval.json", "[report]");
    report_check_eval(e, "fuzz/eval.json");
    for (const auto& row : e["window_map"])
      for (const auto& w : row) AAH_FUZZ_ASSERT(w.get<int64_t>() >= 1);
  });
  return 0;
}
