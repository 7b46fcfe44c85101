// aah <command>: thin parsing and printing; the work happens in the layers below.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench/bench_train.h"
#include "core/check.h"
#include "eval/eval.h"
#include "io/files.h"
#include "io/shard.h"
#include "io/synth.h"
#include "model/config.h"
#include "model/weights.h"
#include "train/train.h"

#if __has_include("bench/bench_attention.h")
#include "bench/bench_attention.h"
#define AAH_HAVE_BENCH_ATTENTION 1
#endif

using namespace aah;

namespace {

std::string config_keys_help() {
  std::string s = "Configuration keys (--set key=value; JSON files use the same names, train.* and aah.* nested):\n";
  for (auto& [k, v] : config_describe(Config{})) s += "  " + k + " = " + v + "\n";
  return s;
}

int cmd_eval(const std::string& run, const std::string& data, bool json, const std::vector<std::string>& sets) {
  Config cfg = run_config_load(run);
  for (auto& s : sets) config_set(cfg, s);
  config_validate(cfg);
  TokenShard val = shard_read(data + "/val.bin");
  if (int64_t(val.vocab_size) > cfg.model.vocab_size)
    fail("[eval] ", val.path, " has vocabulary ", val.vocab_size, " but the model's is ", cfg.model.vocab_size);
  Model<float> model(cfg.model, cfg.train.batch_size, cfg.train.context, /*with_grads=*/false);
  model.dense_attention = cfg.aah.attention == "dense";
  weights_load(run + "/model.safetensors", model);
  EvalResult r = eval_loss(model, val.tokens, cfg.train.context, cfg.train.eval_windows, cfg.train.batch_size);
  if (json) {
    nlohmann::json j = {{"val_loss", r.loss}, {"val_ppl", r.ppl}, {"tokens_per_s", r.tokens_per_s},
                        {"windows", r.windows}, {"tokens", r.tokens}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("val_loss %.4f  ppl %.3f  (%d windows of %d tokens, %.0f tokens/s)\n", r.loss, r.ppl, r.windows,
                cfg.train.context, r.tokens_per_s);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "aah - Asymmetric Attention Heads: train, evaluate and benchmark decoder-only Transformers whose attention\n"
      "heads each get their own causal window.\n\n"
      "Typical use:\n"
      "  aah data synth --out data/synth             # built-in corpus with long-range recall\n"
      "  aah train --data data/synth --out runs/a    # train (defaults: a small model, see --help-config)\n"
      "  aah eval --run runs/a --data data/synth     # validation loss and perplexity\n"
      "  aah bench train                             # training speed of the bench-c reference config\n"};
  app.set_help_all_flag("--help-all", "Help for every command");
  bool help_config = false;
  app.add_flag("--help-config", help_config, "List every configuration key with its default and meaning");
  app.require_subcommand(0, 1);

  // data
  auto* data = app.add_subcommand("data", "Prepare a corpus: DIR/train.bin, DIR/val.bin, DIR/meta.json");
  data->require_subcommand(1);
  auto* synth = data->add_subcommand("synth", "Built-in synthetic corpus (local grammar + long-range key/value recall)");
  std::string data_out;
  SynthOptions so;
  synth->add_option("--out", data_out, "Output directory")->required();
  synth->add_option("--tokens", so.tokens, "Total tokens (train + val)")->capture_default_str();
  synth->add_option("--vocab", so.vocab_size, "Vocabulary size")->capture_default_str();
  synth->add_option("--seed", so.seed, "Generator seed")->capture_default_str();
  synth->add_option("--doc-tokens", so.doc_tokens, "Mean document length")->capture_default_str();
  synth->add_option("--min-distance", so.min_distance, "Shortest DEF-to-ASK distance")->capture_default_str();
  synth->add_option("--max-distance", so.max_distance, "Longest DEF-to-ASK distance")->capture_default_str();

  // train
  auto* train = app.add_subcommand("train", "Train a model; writes a run directory (config.json, model.safetensors, "
                                             "training_state.safetensors, metrics.jsonl)");
  TrainOptions to;
  std::string config_file;
  train->add_option("--data", to.data_dir, "Data directory with train.bin and val.bin")->required();
  train->add_option("--out", to.out_dir, "Run directory (with --resume: the run to continue)")->required();
  train->add_option("--config", config_file, "JSON config file (HF Qwen3 keys, \"train\" and \"aah\" blocks)");
  train->add_option("--set", to.sets, "Override a key: --set train.lr=3e-4 (repeatable; see --help-config)");
  train->add_flag("--resume", to.resume, "Continue the run in --out from its last checkpoint (bit-identical)");
  train->add_flag("--force", to.force, "Overwrite an existing run directory");
  train->add_flag("--quiet", to.quiet, "No progress lines");
  train->add_option("--stop-after", to.stop_after, "Checkpoint and stop after N steps, as if interrupted");

  // eval
  auto* eval = app.add_subcommand("eval", "Validation loss and perplexity of a run's model on DIR/val.bin");
  std::string eval_run, eval_data;
  bool eval_json = false;
  std::vector<std::string> eval_sets;
  eval->add_option("--run", eval_run, "Run directory")->required();
  eval->add_option("--data", eval_data, "Data directory with val.bin")->required();
  eval->add_option("--set", eval_sets, "Override a key, e.g. --set train.eval_windows=64");
  eval->add_flag("--json", eval_json, "Print one JSON object");

  // bench
  auto* bench = app.add_subcommand("bench", "Benchmarks (figures and ratios measured side by side in one process)");
  bench->require_subcommand(1);
  auto* bench_train_cmd = bench->add_subcommand("train", "Training step of bench-c: tokens/s, GFLOP/s, share of sgemm");
  bool bench_json = false;
  int bench_steps = 5;
  bench_train_cmd->add_flag("--json", bench_json, "One JSON object per line");
  bench_train_cmd->add_option("--steps", bench_steps, "Timed steps (median reported)")->capture_default_str();
#ifdef AAH_HAVE_BENCH_ATTENTION
  auto* bench_attn_cmd = bench->add_subcommand("attention", "Windowed attention kernel vs full windows and dense path");
  bench_attn_cmd->add_flag("--json", bench_json, "One JSON object per line");
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (help_config) {
      std::fputs(config_keys_help().c_str(), stdout);
      return 0;
    }
    if (*synth) {
      synth_write(data_out, so);
      std::printf("wrote %s/train.bin, val.bin, meta.json\n", data_out.c_str());
      return 0;
    }
    if (*train) {
      if (!config_file.empty()) {
        if (to.resume) fail("[train] --config and --resume together: the run's own config.json is used");
        config_apply_json(to.config, read_json_file(config_file), config_file);
      }
      return train_run(to);
    }
    if (*eval) return cmd_eval(eval_run, eval_data, eval_json, eval_sets);
    if (*bench_train_cmd) return bench_train(bench_json, bench_steps);
#ifdef AAH_HAVE_BENCH_ATTENTION
    if (*bench_attn_cmd) return bench_attention(bench_json);
#endif
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const aah::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
