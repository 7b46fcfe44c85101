#include "experiments/presets.h"

#include "core/check.h"

namespace aah {

namespace {

const std::vector<std::string> kMain = {"full", "grouping_off", "full_adaptive", "shallow_freeze", "deep_reuse"};

// The main job (docs/main-job.md). Brown with a 4,096-token BPE (1.59M training tokens), a 4.3M-parameter model (4 layers,
// 8 heads of 32, width 256), context 256 with windows 32/64/128/256, 300 steps of 8 x 256 tokens (~0.4 epoch):
// about 2.5 minutes per regime on 2 cores, so the five regimes, their evaluations and the report take ~15 minutes.
// Validation loss falls from 8.3 (uniform) to ~5 in that budget: enough learning for the regimes to differ.
std::vector<std::string> cpu_small_sets(int steps) {
  return {"vocab_size=4096",          "hidden_size=256",        "intermediate_size=704",
          "num_hidden_layers=4",      "num_attention_heads=8",  "num_key_value_heads=8",
          "head_dim=32",              "train.context=256",      "train.batch_size=8",
          "train.steps=" + std::to_string(steps), "train.lr=2e-3", "train.min_lr=2e-4",
          "train.warmup_steps=" + std::to_string(steps / 10), "train.log_interval=10",
          "train.eval_interval=" + std::to_string(std::max(10, steps / 6)), "train.eval_windows=64"};
}

constexpr int kCpuSmallSteps = 300;

// The main job (preset "main", docs/main-job.md): a context where attention is about half of a full-window training step
// (measured: `aah bench train --preset main`), so that windows can pay. Brown with a 1,024-token BPE (2.18M training
// tokens; documents average ~4,500 tokens, so a 2,048-token context sees long-range text), a 1.0M-parameter model
// (4 layers, 4 heads of 32, width 128), context 2048 with windows 256/512/1024/2048, 200 steps of 1 x 2048 tokens.
// A small model and batch 1 buy steps: in this budget the validation loss falls from 6.93 (uniform) past the
// unigram's 6.03 to ~5.3. Three seeds of seven regimes in ~30 minutes on 2 cores.
std::vector<std::string> main_sets(int steps) {
  return {"vocab_size=1024",          "hidden_size=128",        "intermediate_size=384",
          "num_hidden_layers=4",      "num_attention_heads=4",  "num_key_value_heads=4",
          "head_dim=32",              "train.context=2048",     "train.batch_size=1",
          "train.steps=" + std::to_string(steps), "train.lr=4e-3", "train.min_lr=3e-4",
          "train.warmup_steps=" + std::to_string(steps / 10), "train.log_interval=10",
          "train.eval_interval=" + std::to_string(std::max(10, steps / 4)), "train.eval_windows=8"};
}
constexpr int kMainSteps = 200;

// Preset "long" (issue 16: does AAH reach full attention's loss sooner?). main's model (4 layers, 4 heads of 32, width
// 128, 1.0M parameters) at context 8192, windows 1024/2048/4096/8192, 300 steps of 1 x 8192 tokens (2.5M tokens,
// 0.58 epoch), learning rate as in main (a 40-step check at 4e-3 fell steadily, no spikes).
// Corpus: the Python standard library, one document per .py file, BPE 1,024 (4.24M training tokens in 634
// documents; mean 6,683 tokens, median 3,232, 90th percentile 17,815). Long enough for this context: 68% of the
// training tokens lie in documents of 8,192 tokens or more, 41% have 8,191 or more tokens of their own document
// before them, and 73% of the causal (query, key) pairs of a random 8,192-token training window lie within one
// document (Brown's documents, ~4,500 tokens at this vocabulary, would leave most of the context to other ones).
// Validation: the first 4 windows of 8,192 tokens (train.eval_windows), 76% of their pairs within one document.
// Time, measured on this project's 2-core AMD EPYC (idle, 2 threads, 12 training steps per regime): full 2.2 s per
// step; full_adaptive 1.5-1.75 s at pair ratio 0.57-0.75 (its windows of the first steps); coverage at pair budget
// 0.5 1.2 s plus 0.55 s of mass measurement every 5th step (1.3 s mean), at budget 0.739 1.8 s; an evaluation
// window 0.72 s at full windows. Predicted suite: full ~11.6 min (300 steps, 10 evaluations of 4 windows, the final
// aah eval), full_adaptive ~7.7-9.2 min and coverage_matched ~8.3-9.8 min (pair ratio 0.55-0.75), timing ~1.2 min:
// ~29-32 minutes; ~36.5 at most, were every regime as slow as full plus the mass measurement.
std::vector<std::string> long_sets(int steps) {
  return {"vocab_size=1024",
          "hidden_size=128",
          "intermediate_size=384",
          "num_hidden_layers=4",
          "num_attention_heads=4",
          "num_key_value_heads=4",
          "head_dim=32",
          "train.context=8192",
          "train.batch_size=1",
          "train.steps=" + std::to_string(steps),
          "train.lr=4e-3",
          "train.min_lr=3e-4",
          "train.warmup_steps=" + std::to_string(steps / 10),
          "train.log_interval=10",
          "train.eval_interval=" + std::to_string(std::max(10, steps / 10)),
          "train.eval_windows=4"};
}
constexpr int kLongSteps = 300;

// The retrieval preset's synth corpus, tuned by measurement (docs/retrieval.md): 32 keys, each defined at most
// once per 256-token document and consecutive documents from alternate halves (no older DEF of an asked key to
// confuse), 16 values, a DEF at 8% of the grammar
// positions, DEF-to-ASK distances log-uniform in [4, 200] (as many short questions as long: the short ones teach
// the copy, which then reaches the long ones). Uniform distances in [64, 1536] at context 2048 stayed at chance
// (1 / values) after 600 to 1,500 steps on 2 cores: attention spread over 2,048 positions learns the copy too slowly.
SynthOptions retrieval_synth() {
  SynthOptions s;
  s.tokens = 2'000'000;
  s.keys = 32;
  s.values = 16;
  s.unique_keys = true;
  s.doc_tokens = 256;
  s.def_rate = 0.08;
  s.min_distance = 4;
  s.max_distance = 200;
  s.log_distance = true;
  return s;
}
constexpr int kRetrievalBaseSteps = 12000;

// The presets, one function each: everything but the name.

// CI's end-to-end check: seconds per run, every code path of the suite and the report.
void smoke_preset(SuitePreset& p) {
  p.summary =
      "tiny model on synth data, a 40-step full-attention base, the five main regimes fine-tuned from it, "
      "1 seed (under 2 minutes)";
  p.data = "synth", p.data_vocab = 512, p.synth.tokens = 200'000;
  p.sets = {"vocab_size=512",
            "hidden_size=64",
            "intermediate_size=128",
            "num_hidden_layers=2",
            "num_attention_heads=8",
            "num_key_value_heads=4",
            "head_dim=8",
            "train.context=128",
            "train.batch_size=4",
            "train.steps=100",
            "train.lr=3e-3",
            "train.min_lr=3e-4",
            "train.warmup_steps=10",
            "train.log_interval=5",
            "train.eval_interval=20",
            "train.eval_windows=16",
            "aah.control_interval=2"};
  p.base = true, p.base_sets = {"train.steps=40"};  // the pretrained-start path too (the retrieval preset's)
  p.regimes = kMain;
  p.seeds = {0};
  p.timing_budget_s = 2;
}

// The main job's setting (main_sets), the main and baselines presets': Brown, 200 steps, 3 seeds.
void main_setting(SuitePreset& p) {
  p.data = "brown", p.data_vocab = 1024;
  p.sets = main_sets(kMainSteps);
  p.seeds = {0, 1, 2};
}

void main_preset(SuitePreset& p) {
  p.summary =
      "Brown corpus, 1.0M-parameter model, context 2048, the five main regimes + a fixed window, the "
      "coverage policy and the copy-use policy at full_adaptive's pair ratio, 3 seeds, 200 steps (~30 minutes)";
  main_setting(p);
  p.regimes = kMain;
  p.regimes.insert(p.regimes.end(), {"fixed_matched", "coverage_matched", "copy_matched"});
}

// The other matched-cost baselines of the main job's question, on its setting.
void baselines_preset(SuitePreset& p) {
  p.summary =
      "the main job's setting: full, full_adaptive, fixed_matched, coverage (threshold 0.95, no budget), "
      "copy_matched, random_window, deterministic_window, 3 seeds (~12 minutes on 2 AVX-512 cores)";
  main_setting(p);
  p.regimes = {"full",         "full_adaptive", "fixed_matched",       "coverage",
               "copy_matched", "random_window", "deterministic_window"};
}

// Time to loss at long context: full attention, the paper's full_adaptive and the need-aware policy at
// full_adaptive's final pair ratio (coverage_matched: plain `coverage` at threshold 0.95 kept full windows in the
// main job, i.e. full's cost plus its measurement; give --regimes full,full_adaptive,coverage to run it).
void long_preset(SuitePreset& p) {
  p.summary =
      "Python stdlib (long documents), 1.0M-parameter model, context 8192: full, full_adaptive and the "
      "coverage policy at full_adaptive's pair ratio, 1 seed, 300 steps (~20-45 minutes on 2 cores: a full-window "
      "step took 2.2 s on an AMD EPYC, 1.5 s on an Intel Xeon with AVX-512; --seeds 0,1,2 for intervals, ~1 h)";
  p.data = "code", p.data_vocab = 1024;
  p.sets = long_sets(kLongSteps);
  p.regimes = {"full", "full_adaptive", "coverage_matched"};
  p.seeds = {0};
}

// Ground truth for long-range heads (issue 15): synth key/value recall, where some heads must reach back. The
// copy (an induction circuit) forms only after ~4,000-7,000 steps of this model, too late for 24 runs from
// scratch in the budget, so each seed first trains a full-attention base until it retrieves, and every regime
// fine-tunes from it (the DuoAttention setting): do the windows the regimes choose keep the heads that matter?
// The base keeps its peak learning rate after warmup: with a cosine decay over 8,000 steps one seed of three
// formed the copy only partly (33% at distance 128+). When the copy forms varies from run to run (between
// steps ~4,000 and ~7,500 in the runs measured, on 1 or 2 threads), so the base runs 12,000 steps.
void retrieval_preset(SuitePreset& p) {
  p.summary =
      "synth key/value recall at context 256 (distances 4-200), 0.1M-parameter model: per seed a full-"
      "attention base of 12,000 steps, then the five main regimes + coverage and copy use (per head and counted once) "
      "at pair budget 0.5 with its controls (copy use shuffled across heads, the oracle of per-head cuts), a fixed "
      "window and random windows fine-tune 1,000 steps from it, 3 seeds (~50 minutes; a base that does not retrieve "
      "trains on or starts again: up to ~20 more minutes each)";
  p.data = "synth", p.data_vocab = 128;
  p.synth = retrieval_synth();
  p.sets = {"vocab_size=128",
            "hidden_size=64",
            "intermediate_size=192",
            "num_hidden_layers=2",
            "num_attention_heads=4",
            "num_key_value_heads=4",
            "head_dim=16",
            "train.context=256",
            "train.batch_size=8",
            "train.steps=1000",
            "train.lr=1e-3",
            "train.min_lr=1e-4",
            "train.warmup_steps=100",
            "train.log_interval=50",
            "train.eval_interval=250",
            "train.eval_windows=256"};
  p.base = true;
  p.base_sets = {"train.steps=" + std::to_string(kRetrievalBaseSteps),
                 "train.lr=3e-3",
                 "train.min_lr=3e-3",
                 "train.warmup_steps=" + std::to_string(kRetrievalBaseSteps / 10),
                 "train.log_interval=100",
                 "train.eval_interval=" + std::to_string(kRetrievalBaseSteps / 4)};
  // A base whose copy has not formed by then (5 seeds of 20) trains on 6,000 steps (rescued 1 of 5); one that still
  // does not retrieve starts again from a new initialization, at most twice: training on from 18,000 to 36,000
  // rescued 1 of 4, a fresh start retrieves by 18,000 on 16 of 20 seeds (docs/retrieval.md).
  p.base_extend_steps = kRetrievalBaseSteps / 2, p.base_max_steps = 3 * kRetrievalBaseSteps / 2;
  p.base_restarts = 2;
  p.regimes = kMain;
  p.regimes.insert(p.regimes.end(),
                   {"coverage_budget_500", "copy_budget_500", "copy_budget_500+copy_shuffled", "copy_once_budget_500",
                    "copy_once_budget_500+copy_shuffled", "oracle_budget_500", "fixed_matched", "random_window"});
  p.seeds = {0, 1, 2};
  p.timing_budget_s = 30;
}

void cpu_small_preset(SuitePreset& p) {
  p.summary = "Brown corpus, 4.3M-parameter model, context 256, the five main regimes, 300 steps (~15 minutes)";
  p.data = "brown", p.data_vocab = 4096;
  p.sets = cpu_small_sets(kCpuSmallSteps);
  p.regimes = kMain;
  p.seeds = {0};
}

// The setting of the screening and diagnostics presets: cpu-small's at 30% of its steps, one seed.
void cpu_small_short(SuitePreset& p) {
  p.data = "brown", p.data_vocab = 4096;
  p.sets = cpu_small_sets(kCpuSmallSteps * 3 / 10);
  p.seeds = {0};
}

// The paper's Phase-1 screening set (its Table 5) at 30% of cpu-small's steps.
void screening_preset(SuitePreset& p) {
  p.summary = "the paper's Phase-1 screening ablations (Table 5) at 30% of cpu-small's steps";
  cpu_small_short(p);
  p.sets.push_back("aah.fixed_window=64");  // fixed window T/4
  p.regimes = {"full",
               "shallow_freeze",
               "shallow_freeze+control_interval_10",
               "fixed_window",
               "fixed_random_grouping",
               "full_adaptive+shuffle_post_select",
               "shallow_freeze+shuffle_post_select"};
}

// The appendix's mechanism checks: each variant changes one thing of full_adaptive.
void diagnostics_preset(SuitePreset& p) {
  p.summary = "the appendix's mechanism checks, each one change to full_adaptive";
  cpu_small_short(p);
  p.regimes = {"full",
               "full_adaptive",
               "control_off",
               "fixed_random_grouping",
               "freeze_after_warmup",
               "independent_scoring",
               "no_parent_constraint",
               "no_feature_ema",
               "deterministic_window",
               "random_window"};
}

// The paper's protocol as written (for bigger machines): context 4096, windows 512..4096, 10,000 steps of
// batch 1, control every 5 steps, feature EMA 0.9, resolution EMA 0.15, checkpoints at 1k/5k/10k,
// evaluation every 1,000 steps, seed 0. The model is bench-c's shape widened to 8 layers of 8 x 64.
void paper_4096_preset(SuitePreset& p) {
  p.summary = "the paper's protocol: context 4096, windows 512-4096, 10,000 steps, batch 1 (bigger machines)";
  p.data = "brown", p.data_vocab = 8192;
  p.sets = {"vocab_size=8192",
            "hidden_size=512",
            "intermediate_size=1408",
            "num_hidden_layers=8",
            "num_attention_heads=8",
            "num_key_value_heads=8",
            "head_dim=64",
            "train.context=4096",
            "train.batch_size=1",
            "train.steps=10000",
            "train.lr=1e-3",
            "train.min_lr=1e-4",
            "train.warmup_steps=500",
            "train.log_interval=10",
            "train.eval_interval=1000",
            "train.eval_windows=15",
            "train.checkpoint_steps=[1000,5000,10000]",
            "aah.windows=[512,1024,2048,4096]",
            "aah.control_interval=5",
            "aah.feature_ema=0.9",
            "aah.resolution_ema=0.15"};
  p.regimes = kMain;
  p.seeds = {0};
}

}  // namespace

const std::vector<std::string>& suite_preset_names() {
  static const std::vector<std::string> names = {"smoke",     "cpu-small", "main",        "baselines", "long",
                                                 "retrieval", "screening", "diagnostics", "paper-4096"};
  return names;
}

SuitePreset suite_preset(const std::string& name) {
  SuitePreset p;
  p.name = name;
  if (name == "smoke") {
    smoke_preset(p);
  } else if (name == "main") {
    main_preset(p);
  } else if (name == "baselines") {
    baselines_preset(p);
  } else if (name == "long") {
    long_preset(p);
  } else if (name == "retrieval") {
    retrieval_preset(p);
  } else if (name == "cpu-small") {
    cpu_small_preset(p);
  } else if (name == "screening") {
    screening_preset(p);
  } else if (name == "diagnostics") {
    diagnostics_preset(p);
  } else if (name == "paper-4096") {
    paper_4096_preset(p);
  } else {
    std::string known;
    for (const auto& n : suite_preset_names()) known += (known.empty() ? "" : ", ") + n;
    fail("[suite] unknown preset '", name, "' (known: ", known, ")");
  }
  return p;
}

}  // namespace aah
