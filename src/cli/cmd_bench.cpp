// aah bench <what>: benchmarks that print figures and ratios measured side by side in one process.
#include "bench/bench_decode.h"
#include "bench/bench_maps.h"
#include "bench/bench_train.h"
#include "bench/measure.h"
#include "cli/commands.h"
#include "core/sys.h"

#if __has_include("bench/bench_attention.h")
#include "bench/bench_attention.h"
#define AAH_HAVE_BENCH_ATTENTION 1
#endif

#if __has_include("bench/bench_tokenizer.h")
#include "bench/bench_tokenizer.h"
#define AAH_HAVE_BENCH_TOKENIZER 1
#endif

namespace aah {

namespace {

const char* kMeasureHelp =
    "How every bench measures (src/bench/measure.h): the configurations it compares run interleaved in one process,\n"
    "A B C A B C ..., so that a drift of the machine's speed hits them alike; ratios are taken per round (A_i / B_i)\n"
    "before their median. After --warmup untimed rounds, rounds go on until every spread (interquartile range /\n"
    "median) is at most --spread (and at least --rounds-min rounds ran), until the next round would end past\n"
    "--budget seconds, or until --rounds-max. Figures are medians, with min and spread; a figure whose spread stays\n"
    "over --spread is flagged ('!' in text, \"flagged\": true in --json): not a result.";

// The flags every bench takes: output form and measurement.
void add_measure_flags(CLI::App* cmd, BenchOptions& o) {
  cmd->footer(kMeasureHelp);
  cmd->add_flag("--json", o.json, "One JSON object per line (medians, plus a \"stats\" object per figure)");
  cmd->add_flag("--samples", o.samples, "With --json: also every round's sample");
  auto& m = o.measure;
  cmd->add_option("--warmup", m.warmup_rounds, "Untimed rounds before the timed ones")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--rounds-min", m.rounds_min, "Timed rounds at least (even past the budget)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--rounds-max", m.rounds_max, "Timed rounds at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--budget", m.budget_s,
                  "Seconds per comparison, warm-up included: no round starts that would end past it (once "
                  "--rounds-min ran)")
      ->check(kFiniteNumber & CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--spread", m.spread,
                  "Stop once every spread (IQR / median) is at most this; figures above it are flagged")
      ->check(kFiniteNumber & CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag_function("--progress", [&m](int64_t) { m.progress = stderr; }, "A line per timed round on stderr");
}

}  // namespace

void add_bench_commands(CLI::App& app, int& rc) {
  auto* bench = app.add_subcommand("bench", "Benchmarks (figures and ratios measured side by side in one process)");
  bench->require_subcommand(1);
  // Every bench's figures depend on OpenBLAS's kernels: say so when the user's OPENBLAS_CORETYPE narrows them.
  bench->parse_complete_callback([] {
    const std::string note = blas_coretype_note_here();
    if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  });
  static BenchOptions opts;
  static int steps = 0;
  static std::string regime = "full";
  static int context = 1024;
  static std::string preset;
  static std::vector<std::string> window_sets;
  auto* tr = bench->add_subcommand("train", "Training step of bench-c: tokens/s, GFLOP/s, share of sgemm");
  add_measure_flags(tr, opts);
  tr->add_option("--steps", steps, "Same as --rounds-min: timed steps per configuration at least");
  tr->add_option("--regime", regime,
                 "Also time this AAH regime, interleaved with full windows (its controller warmed up first, then "
                 "its windows frozen)")
      ->capture_default_str();
  tr->add_option("--context", context, "Sequence length (batch = 4096 / context, so 4096 tokens per step)")
      ->capture_default_str();
  tr->add_option("--preset", preset,
                 "Time a suite preset's model, context and batch instead of bench-c (e.g. --preset main: the share of "
                 "attention in its full-window step)");
  tr->add_option("--windows", window_sets,
                 "Also time fixed window sets (same in every layer), interleaved with full windows: mix (the "
                 "paper's final Full-adaptive mix: 4 x T/8, 2 x T/4, T/2, T on 8 heads), T/8")
      ->delimiter(',')
      ->check(CLI::IsMember({"mix", "T/8"}));
  static std::vector<std::string> precisions = {"fp32"};
  tr->add_option("--precision", precisions,
                 "fp32 (always timed: the reference) and bf16: the full-window step at train.precision=bf16 (bf16 "
                 "products on oneDNN) and oneDNN's bf16 product, interleaved with the rest, e.g. fp32,bf16")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  tr->callback([&rc] {
    if (steps > 0) opts.measure.rounds_min = steps, opts.measure.rounds_max = std::max(opts.measure.rounds_max, steps);
    rc = bench_train(opts, regime, context, preset, window_sets, precisions);
  });
  auto* dc = bench->add_subcommand("decode", "KV cache sized per head: bytes, decode and prefill tokens/s vs full windows");
  add_measure_flags(dc, opts);
  static int decode_context = 4096;
  dc->add_option("--context", decode_context,
                 "Context: the last 128 tokens are decoded one by one after a prefill of the others")
      ->capture_default_str()
      ->check(CLI::Range(256, 1 << 20));
  static std::vector<std::string> decode_precisions = {"fp32"};
  dc->add_option("--precision", decode_precisions,
                 "fp32 (always timed: the reference) and bf16: both window sets again at train.precision=bf16, whose "
                 "decoder keeps its KV cache and weight matrices in bf16 (half the bytes), interleaved, e.g. fp32,bf16")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  dc->callback([&rc] { rc = bench_decode(opts, decode_context, decode_precisions); });
  static std::string suite_dir;
  auto* mp = bench->add_subcommand(
      "maps", "A suite's final window maps side by side: training step and evaluation batch time per regime vs full");
  add_measure_flags(mp, opts);
  mp->add_option("--suite", suite_dir, "Suite directory (its runs/*/eval.json window maps and config.json)")->required();
  mp->callback([&rc] { rc = bench_maps(opts, suite_dir); });
#ifdef AAH_HAVE_BENCH_TOKENIZER
  auto* tk = bench->add_subcommand("tokenizer", "Byte-level BPE (vocab 8192): training time on 10 MB, encoding MB/s");
  add_measure_flags(tk, opts);
  tk->callback([&rc] { rc = bench_tokenizer(opts); });
#endif
#ifdef AAH_HAVE_BENCH_ATTENTION
  auto* at = bench->add_subcommand("attention", "Windowed attention kernel vs full windows and the dense path");
  add_measure_flags(at, opts);
  static std::vector<int> attn_contexts, attn_dims, attn_windows;
  static bool attn_no_dense = false;
  static double attn_min_sample = 0.05;
  at->add_option("--context", attn_contexts, "Contexts T to time, e.g. 1024,4096 (default 1024,4096,16384)")
      ->delimiter(',')
      ->check(CLI::Range(64, 1 << 17));
  at->add_option("--head-dim", attn_dims,
                 "Head dims D to time, e.g. 64 (default 32,64,128; T > 4096 runs D = 64 only unless this is given)")
      ->delimiter(',')
      ->check(CLI::Range(8, 512));
  at->add_option("--window", attn_windows,
                 "Also time window sets with every head at W (tiled path, each T >= W), e.g. 64,128,256: the goal "
                 "t/p <= 1.10 covers every W >= 64, the default sets only T/8 and up")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 17));
  at->add_flag("--no-dense", attn_no_dense, "Skip the dense-masked path (the tiled kernel's windows only)");
  static std::vector<std::string> attn_precisions = {"fp32"};
  at->add_option("--precision", attn_precisions,
                 "fp32 (always timed: the reference) and bf16: the tiled path again for every window set through the "
                 "backend local-bf16 (its attention forward and backward: the bf16 kernel, on AMX tiles where the CPU "
                 "has AMX, else with AVX-512 BF16 dot products), with oneDNN's bf16 product as its "
                 "reference rate, interleaved with the fp32 cases; a second table gives each bf16 row beside its fp32 "
                 "time with the per-round speedup (fp32 time / bf16 time) and the share of the bf16 product, --json a "
                 "row per precision. The dense path stays fp32. Refused on a CPU without AVX-512 BF16 or AMX. E.g. "
                 "--context 1024 --head-dim 64 --no-dense --precision fp32,bf16")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  at->add_option("--min-sample", attn_min_sample,
                 "Seconds one sample lasts at least: a shorter kernel call repeats back to back within it (the "
                 "warm-up round sets how often) and the sample is its mean; 0 = one call per sample")
      ->check(kFiniteNumber & CLI::NonNegativeNumber)
      ->capture_default_str();
  at->callback([&rc] {
    opts.measure.min_sample_s = attn_min_sample;
    if (attn_min_sample > 0) opts.measure.warmup_rounds = std::max(opts.measure.warmup_rounds, 1);
    rc = bench_attention(opts, attn_contexts, attn_dims, !attn_no_dense, attn_windows, attn_precisions);
  });
#endif
}

}  // namespace aah
