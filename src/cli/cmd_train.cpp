// aah train, aah eval.
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/window_policy.h"
#include "formats/safetensors.h"
#include "core/check.h"
#include "eval/eval.h"
#include "eval/eval_run.h"
#include "core/files.h"
#include "data/shard.h"
#include "text/tokenizer.h"
#include "model/config.h"
#include "model/weights.h"
#include "train/train.h"

namespace aah {

namespace {

int run_eval(const EvalRunOptions& o, bool json, bool vs_full) {
  nlohmann::json r = eval_run(o);
  if (vs_full) {  // the same model and tokens with every window full: the loss change the regime makes
    EvalRunOptions full = o;
    full.sets.push_back("aah.regime=full");
    const nlohmann::json f = eval_run(full);
    r["full_val_loss"] = f["val_loss"];
    r["delta_val_loss_vs_full"] = r["val_loss"].get<double>() - f["val_loss"].get<double>();
  }
  if (json) {
    std::printf("%s\n", r.dump().c_str());
  } else {
    std::printf("val_loss %.4f  ppl %.3f  inference ACR %.4f  pair ratio %.4f  attention work ratio %.4f\n"
                "(%d windows of %d tokens, %.0f tokens/s after warmup, peak %.0f MB%s)\n",
                r["val_loss"].get<double>(), r["val_ppl"].get<double>(), r["inference_acr"].get<double>(),
                r["pair_ratio"].get<double>(), r["attn_work_ratio"].get<double>(), r["windows"].get<int>(),
                r["context"].get<int>(), r["tokens_per_s"].get<double>(), r["peak_rss_mb"].get<double>(),
                r["windows_decided_at_eval"].get<bool>() ? ", windows decided during evaluation" : "");
    if (vs_full)
      std::printf("full attention: val_loss %.4f; change under %s: %+.4f\n", r["full_val_loss"].get<double>(),
                  r["regime"].get<std::string>().c_str(), r["delta_val_loss_vs_full"].get<double>());
    if (r.contains("retrieval")) {  // synth data: accuracy of the value after ASK k, by DEF-ASK distance
      auto pct = [](const nlohmann::json& x) {
        return x.is_null() ? std::string("-") : str_cat(std::round(x.get<double>() * 1000) / 10, "%");
      };
      const nlohmann::json& rt = r["retrieval"];
      std::string line = str_cat("retrieval accuracy ", pct(rt["accuracy"]), " of ", rt["n"].dump(), " questions;");
      for (auto& b : rt["buckets"])
        line += str_cat(" [", b["lo"].dump(), ", ", b["hi"].is_null() ? "inf" : b["hi"].dump(), "): ",
                        pct(b["accuracy"]), " of ", b["n"].dump());
      std::printf("%s\n", line.c_str());
    }
    if (r.contains("far_copy")) {  // any corpus: loss on far copies against frequency-matched novel tokens
      auto num = [](const nlohmann::json& x) {
        char b[32];
        std::snprintf(b, sizeof b, "%.3f", x.is_null() ? 0.0 : x.get<double>());
        return x.is_null() ? std::string("-") : std::string(b);
      };
      const nlohmann::json& fc = r["far_copy"];
      std::string line =
          str_cat("far copies (", fc["ngram"].dump(), "-gram repeats), loss / matched novel tokens' loss:");
      for (auto& b : fc["buckets"])
        line += str_cat(" [", b["lo"].dump(), ", ", b["hi"].is_null() ? "inf" : b["hi"].dump(), "): ", num(b["loss"]),
                        " / ", num(b["control_loss"]), " of ", b["n"].dump());
      std::printf("%s\n", line.c_str());
    }
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
  train->add_option("--data", to.data_dir,
                    "Data directory with train.bin and val.bin (with --resume: optional, the run's recorded data; "
                    "a given one must have the same vocabulary and tokenizer)");
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
    std::vector<std::string> user_keys;  // the keys given by --config's "aah" block and --set
    to.vocab_from_data = true;  // vocab_size defaults to the data's vocabulary unless --config (or --set) gives it
    if (!config_file.empty()) {
      if (to.resume) fail("[train] --config and --resume together: the run's own config.json is used");
      const nlohmann::json j = read_json_file(config_file);
      config_apply_json(to.config, j, config_file);
      if (j.contains("vocab_size")) to.vocab_from_data = false;
      if (!to.resume && j.contains("aah") && j["aah"].is_object())
        for (const auto& [key, value] : j["aah"].items()) user_keys.push_back("aah." + key);
    }
    if (!to.resume) {  // a knob the user set that the chosen policy never reads is a mistake, not a setting
      for (const auto& s : to.sets) user_keys.push_back(s.substr(0, s.find('=')));
      Config given = to.config;
      for (const auto& s : to.sets) config_set(given, s);
      const ControllerConfig cc = controller_config_of(given);
      for (const auto& key : user_keys)
        if (const std::string why = controller_knob_inert(cc, key); !why.empty()) fail("[train] ", why);
    }
    rc = train_run(to);
  });

  auto* eval = app.add_subcommand(
      "eval", "Loss and perplexity of a run's (or a Hugging Face Qwen3 directory's) model on DIR/val.bin or a text");
  static EvalRunOptions eo;
  static bool json = false, vs_full = false;
  eval->add_option("--run", eo.run, "Run directory")->required();
  eval->add_option("--data", eo.data, "Data directory with val.bin");
  eval->add_option("--text", eo.text, "Or: any UTF-8 text file, tokenized with the run's tokenizer.json");
  eval->add_option("--set", eo.sets, "Override a key, e.g. --set train.eval_windows=64 or aah.regime=full_adaptive");
  eval->add_option("--position-bucket", eo.position_bucket,
                   "Tokens per bucket of loss_by_position (the validation loss by position in the context)")
      ->default_val(64);
  eval->add_flag("--json", json,
                 "Print one JSON object: val_loss, val_ppl, inference_acr, window_fractions, pair_ratio, "
                 "attn_work_ratio, tokens_per_s, peak_rss_mb, window_map, loss_by_position, far_copy (the loss on "
                 "tokens a copy from distance d would predict, by distance, beside frequency-matched novel tokens), "
                 "retrieval (synth data), ...");
  eval->add_flag("--vs-full", vs_full,
                 "Also evaluate with every window full and report the loss change the regime makes "
                 "(full_val_loss, delta_val_loss_vs_full)");
  eval->callback([&rc] { rc = run_eval(eo, json, vs_full); });
}

}  // namespace aah
