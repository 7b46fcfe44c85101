// aah train, aah eval.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/window_policy.h"
#include "io/safetensors.h"
#include "core/check.h"
#include "eval/eval.h"
#include "io/files.h"
#include "io/shard.h"
#include "io/tokenizer.h"
#include "model/config.h"
#include "model/weights.h"
#include "train/train.h"

namespace aah {

namespace {

int run_eval(const std::string& run, const std::string& data, const std::string& text, bool json,
             const std::vector<std::string>& sets) {
  Config cfg = run_config_load(run);
  for (auto& s : sets) config_set(cfg, s);
  config_validate(cfg);
  if (data.empty() == text.empty()) fail("[eval] give exactly one of --data DIR or --text FILE");
  TokenShard val;
  if (!text.empty()) {  // any UTF-8 text, tokenized with the run's tokenizer
    const std::string tok_path = run + "/tokenizer.json";
    if (!file_exists(tok_path)) fail("[eval] ", run, ": no tokenizer.json to tokenize ", text);
    val.path = text;
    val.tokens = Tokenizer::load(tok_path).encode(read_file(text));
    val.vocab_size = 0;
    for (int32_t id : val.tokens) val.vocab_size = std::max<uint32_t>(val.vocab_size, uint32_t(id) + 1);
  } else {
    val = shard_read(data + "/val.bin");
  }
  if (int64_t(val.vocab_size) > cfg.model.vocab_size)
    fail("[eval] ", val.path, " has vocabulary ", val.vocab_size, " but the model's is ", cfg.model.vocab_size);
  Model<float> model(cfg.model, cfg.train.batch_size, cfg.train.context, /*with_grads=*/false);
  model.dense_attention = cfg.aah.attention == "dense";
  weights_load_dir(run, model);
  // The windows: the checkpoint's cached decisions when the run was trained under this regime; otherwise (a
  // pretrained model, or --set aah.regime=...) the regime's controller, with its seeded scorers, decides them
  // during evaluation: every evaluation batch is a control update, starting from full windows.
  WindowPolicyRunner policy(cfg, model);
  const std::string state = run + "/controller_state.safetensors";
  bool decide = true;
  if (file_exists(state)) {
    SafetensorsReader reader(state);
    if (reader.metadata().count("regime") && reader.metadata().at("regime") == cfg.aah.regime) {
      policy.load(reader);
      decide = false;
    }
  }
  const Controller& controller = policy.controller();
  const int interval = controller.config().control_interval;
  double acr_sum = 0, pair_sum = 0, rows_sum = 0;  // inference ACR: over (layer, head, sequence) executions
  EvalResult r = eval_loss(model, val.tokens, cfg.train.context, cfg.train.eval_windows, cfg.train.batch_size,
                           [&](int batch, int rows, bool before) {
                             if (before) {
                               policy.begin_forward(batch * interval, decide);
                               return;
                             }
                             policy.end_forward();
                             acr_sum += controller.acr() * rows;
                             pair_sum += controller.exact_pair_ratio(cfg.train.context) * rows;
                             rows_sum += rows;
                           });
  const double acr = acr_sum / rows_sum, pair_ratio = pair_sum / rows_sum;
  if (json) {
    nlohmann::json j = {{"val_loss", r.loss},        {"val_ppl", r.ppl},
                        {"tokens_per_s", r.tokens_per_s}, {"windows", r.windows},
                        {"tokens", r.tokens},          {"attn_ratio", acr},
                        {"pair_ratio", pair_ratio},    {"windows_decided_at_eval", decide}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("val_loss %.4f  ppl %.3f  ACR %.4f  pair ratio %.4f  (%d windows of %d tokens, %.0f tokens/s)\n",
                r.loss, r.ppl, acr, pair_ratio, r.windows,
                cfg.train.context, r.tokens_per_s);
  }
  return 0;
}

}  // namespace

void add_train_commands(CLI::App& app, int& rc) {
  auto* train = app.add_subcommand("train",
                                   "Train a model; writes a run directory (config.json, model.safetensors, "
                                   "training_state.safetensors, metrics.jsonl)");
  static TrainOptions to;
  static std::string config_file;
  train->add_option("--data", to.data_dir, "Data directory with train.bin and val.bin")->required();
  train->add_option("--out", to.out_dir, "Run directory (with --resume: the run to continue)")->required();
  train->add_option("--config", config_file, "JSON config file (HF Qwen3 keys, \"train\" and \"aah\" blocks)");
  train->add_option("--set", to.sets, "Override a key: --set train.lr=3e-4 (repeatable; see --help-config)");
  train->add_flag("--resume", to.resume, "Continue the run in --out from its last checkpoint (bit-identical)");
  train->add_flag("--force", to.force, "Overwrite an existing run directory");
  train->add_flag("--quiet", to.quiet, "No progress lines");
  train->add_option("--trace-controller", to.trace_file,
                    "Write one JSON line per layer per control update (features, hierarchy, logits, decisions)");
  train->add_option("--stop-after", to.stop_after, "Checkpoint and stop after N steps, as if interrupted");
  train->add_option("--allreduce", to.allreduce,
                    "Under mpirun: all-reduce gradients in buckets during backward (overlap) or after it (blocking)")
      ->check(CLI::IsMember({"overlap", "blocking"}));
  train->callback([&rc] {
    if (!config_file.empty()) {
      if (to.resume) fail("[train] --config and --resume together: the run's own config.json is used");
      config_apply_json(to.config, read_json_file(config_file), config_file);
    }
    rc = train_run(to);
  });

  auto* eval = app.add_subcommand(
      "eval", "Loss and perplexity of a run's (or a Hugging Face Qwen3 directory's) model on DIR/val.bin or a text");
  static std::string run, data, text;
  static bool json = false;
  static std::vector<std::string> sets;
  eval->add_option("--run", run, "Run directory")->required();
  eval->add_option("--data", data, "Data directory with val.bin");
  eval->add_option("--text", text, "Or: any UTF-8 text file, tokenized with the run's tokenizer.json");
  eval->add_option("--set", sets, "Override a key, e.g. --set train.eval_windows=64");
  eval->add_flag("--json", json, "Print one JSON object");
  eval->callback([&rc] { rc = run_eval(run, data, text, json, sets); });
}

}  // namespace aah
