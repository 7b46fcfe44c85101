// Run configuration: the model (Hugging Face Qwen3 key names), training (train.*) and the attention-window policy
// (aah.*). One table of keys (fields() in config.cpp, and the controller's knobs, controller_knobs()) drives
// reading JSON, --set key=value, validation, --help-config and writing config.json; see formats/config_table.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/controller_config.h"
#include "formats/config_table.h"

namespace aah {

struct ModelConfig {
  int hidden_size = 256;        // C
  int intermediate_size = 704;  // F
  int num_hidden_layers = 4;    // L
  int num_attention_heads = 8;  // H
  int num_key_value_heads = 8;  // Hkv, divides H
  int head_dim = 32;            // D
  int vocab_size = 8192;        // V
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = true;
  bool qk_norm = true;  // per-head RMSNorm of q and k (Qwen3 has it; not an HF config key, stored under aah)
  int max_position_embeddings = 1024;  // written to config.json as train.context
};

struct TrainConfig {
  int steps = 1000;
  int batch_size = 4;  // sequences per micro-batch
  int context = 256;   // T
  int grad_accum = 1;  // micro-batches per optimizer step
  double lr = 1e-3;
  double min_lr = 1e-4;
  int warmup_steps = 50;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double grad_clip = 1.0;  // 0 disables clipping
  int64_t seed = 0;
  int log_interval = 10;
  int eval_interval = 100;  // 0: only at the end
  int eval_windows = 32;    // validation windows of context+1 tokens
  std::vector<int> checkpoint_steps = {};  // explicit steps; the last step is always checkpointed
  int checkpoint_interval = 0;             // also every N steps when > 0
  std::string nonfinite = "skip";          // non-finite loss or grad norm: "skip" the step or "stop" (kNonfiniteNames)
  double spike_factor = 3.0;  // log a loss spike when a step's loss exceeds this x its running mean (0: off)
  std::string precision =
      "fp32";                 // matrix products: "fp32" or "bf16" (bf16 operands, fp32 accumulation); kPrecisionNames
  std::string init_from;      // start from this run's (or HF Qwen3 directory's) weights; empty: random init
};

struct AahConfig {
  std::string regime = "full";      // a controller regime preset (controller_regime_names()), e.g. full_adaptive
  std::string attention = "local";  // "local" (tiled, skips masked work) or "dense" (T x T scores + mask); kAttentionNames
  // Controller knobs set explicitly ("tau" for aah.tau, ...), each value as its knob row reads it back, applied on
  // top of the regime's preset. Setting aah.regime clears them: a regime is a complete preset, knobs given after it
  // refine it.
  nlohmann::json knobs = nlohmann::json::object();
};

// The names a string-valued key may take (one table each, used by validation and help).
extern const NameList kNonfiniteNames;  // train.nonfinite: skip, stop
extern const NameList kAttentionNames;  // aah.attention: local, dense
extern const NameList kPrecisionNames;  // train.precision: fp32, bf16

struct Config {
  ModelConfig model;
  TrainConfig train;
  AahConfig aah;
};

// Applies a JSON object (a config file, or a run's config.json) on top of cfg. Unknown keys and wrong types are
// errors naming the key and `source`. HF keys that aah does not use (architectures, torch_dtype, ...) are ignored.
void config_apply_json(Config& cfg, const nlohmann::json& j, const std::string& source);
// "train.lr=3e-4", "hidden_size=512", "aah.attention=dense", "train.checkpoint_steps=[100,200]".
void config_set(Config& cfg, const std::string& assignment);
// Checks ranges and relations (H % Hkv == 0, D even, ...); errors name the key.
void config_validate(const Config& cfg);
// Lowers train.context to T (an evaluation of a text shorter than the context) and keeps the window knobs within
// it, since a window beyond the context is an error: aah.fixed_window above T becomes T, explicit aah.windows keep
// those below T and end at T (default windows follow the context anyway).
void config_lower_context(Config& cfg, int T);
// config.json of a run: Qwen3 fields, architectures, plus "train" and "aah" blocks.
nlohmann::json config_to_json(const Config& cfg);
// The controller configuration a run uses: default windows (context/8, /4, /2, /1), the regime's preset, then the
// explicit aah.* knobs; warmup and seed from train.*. Validated; errors name the aah.* key.
ControllerConfig controller_config_of(const Config& cfg);

// Every settable key with its current value (aah.* knobs: as resolved for cfg's regime) and a one-line description
// with its range (for --help-config; docs/config.md comes from config_markdown).
std::vector<std::pair<std::string, std::string>> config_describe(const Config& cfg);
// docs/config.md: every key of the table as a Markdown table (key, default, range, meaning), written from the rows
// (aah --help-config --markdown); a test keeps the committed file equal to it.
std::string config_markdown();

}  // namespace aah
