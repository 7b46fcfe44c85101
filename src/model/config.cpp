#include "model/config.h"

#include "core/check.h"
#include "core/files.h"
#include "kernels/backend.h"
#include "text/unicode.h"

namespace aah {

namespace {

using json = nlohmann::json;

// The table of the run's own keys (model, train.*, aah.regime, aah.attention), pointing into c. The controller's
// aah.* knobs are the rows of controller_knobs() (controller/controller_config.cpp).
std::vector<ConfigField> fields(Config& c) {
  ModelConfig& m = c.model;
  TrainConfig& t = c.train;
  AahConfig& a = c.aah;
  return {
      {"hidden_size", &m.hidden_size, above(0), "model width C"},
      {"intermediate_size", &m.intermediate_size, above(0), "SwiGLU hidden width F"},
      {"num_hidden_layers", &m.num_hidden_layers, above(0), "number of decoder blocks L"},
      {"num_attention_heads", &m.num_attention_heads, above(0), "query heads H"},
      {"num_key_value_heads", &m.num_key_value_heads, above(0), "key/value heads (divides H; < H is grouped-query)"},
      {"head_dim", &m.head_dim, above(0), "per-head dimension D (even)"},
      {"vocab_size", &m.vocab_size, above(1),
       "vocabulary size V (aah train: the data's vocabulary unless given; never below it)"},
      {"rope_theta", &m.rope_theta, above(0), "RoPE base"},
      {"rms_norm_eps", &m.rms_norm_eps, above(0), "RMSNorm epsilon"},
      {"tie_word_embeddings", &m.tie_word_embeddings, {}, "LM head shares the embedding matrix"},
      {"aah.qk_norm", &m.qk_norm, {}, "per-head RMSNorm of q and k before RoPE (Qwen3)"},
      {"train.steps", &t.steps, above(0), "optimizer steps"},
      {"train.batch_size", &t.batch_size, above(0), "sequences per micro-batch"},
      {"train.context", &t.context, above(0), "tokens per sequence T"},
      {"train.grad_accum", &t.grad_accum, above(0), "micro-batches per optimizer step"},
      {"train.lr", &t.lr, above(0), "peak learning rate"},
      {"train.min_lr", &t.min_lr, at_least(0), "learning rate at the end of the cosine decay (<= train.lr)"},
      {"train.warmup_steps", &t.warmup_steps, at_least(0), "linear warmup steps"},
      {"train.weight_decay", &t.weight_decay, at_least(0), "AdamW decoupled weight decay (matrices only)"},
      {"train.beta1", &t.beta1, in_half_open(0, 1), "AdamW beta1"},
      {"train.beta2", &t.beta2, in_half_open(0, 1), "AdamW beta2"},
      {"train.adam_eps", &t.adam_eps, above(0), "AdamW epsilon"},
      {"train.grad_clip", &t.grad_clip, at_least(0), "global gradient-norm clip (0: off)"},
      {"train.seed", &t.seed, at_least(0), "seed of initialization and data sampling"},
      {"train.log_interval", &t.log_interval, above(0), "steps between metrics.jsonl lines"},
      {"train.eval_interval", &t.eval_interval, at_least(0),
       "steps between validation evaluations (0: only at the end)"},
      {"train.eval_windows", &t.eval_windows, above(0), "validation windows of context+1 tokens"},
      {"train.checkpoint_steps", &t.checkpoint_steps, above(0), "steps to checkpoint at, e.g. [1000,5000]"},
      {"train.checkpoint_interval", &t.checkpoint_interval, at_least(0), "also checkpoint every N steps (0: off)"},
      {"train.nonfinite", &t.nonfinite, one_of(kNonfiniteNames),
       "on a non-finite loss or gradient: skip the step, or stop"},
      {"train.spike_factor", &t.spike_factor, zero_or_above(1),
       "log a loss_spike event when a step's loss exceeds this times its running mean (EMA)"},
      {"train.precision", &t.precision, one_of(kPrecisionNames),
       "matrix products: fp32, or bf16 (bf16 operands, fp32 accumulation, fp32 weights, optimizer, norms, softmax "
       "and loss; needs a CPU with AVX-512 BF16 or AMX)"},
      {"train.init_from",
       &t.init_from,
       {},
       "start from the weights of this run or Hugging Face Qwen3 directory (same model shape; optimizer, step and "
       "windows start fresh); empty: random initialization"},
      {"aah.regime",
       &a.regime,
       {},
       "window policy preset: a main regime, optionally joined by '+' with variants (aah.regime names, below)"},
      {"aah.attention", &a.attention, one_of(kAttentionNames),
       "attention execution: local (tiled, skips masked work) or dense (T x T scores + mask)"},
  };
}

// Every key: the run's own, then the controller's knobs (pointing into `knobs`).
std::vector<ConfigField> all_fields(Config& c, ControllerConfig& knobs) {
  std::vector<ConfigField> table = fields(c), k = controller_knobs(knobs);
  table.insert(table.end(), k.begin(), k.end());
  return table;
}

// Sets `key` of cfg. A controller knob is checked against its row (on a scratch ControllerConfig) and stored in
// cfg.aah.knobs as the row reads it back (5.0 -> 5, 8 -> [8] for a list), so controller_config_of reads it as is.
void set_key(Config& cfg, const std::string& key, const json& v, const std::string& source) {
  const std::vector<ConfigField> own = fields(cfg);
  if (const ConfigField* f = field_find(own, key)) {
    field_assign(*f, v, source);
    if (key == "aah.regime") cfg.aah.knobs = json::object();  // a regime is a complete preset
    return;
  }
  ControllerConfig scratch;
  const std::vector<ConfigField> knobs = controller_knobs(scratch);
  if (const ConfigField* f = field_find(knobs, key)) {
    field_assign(*f, v, source);
    cfg.aah.knobs[key.substr(4)] = field_json(*f);  // "aah.tau" -> "tau"
    return;
  }
  fail("[config] ", source, ": unknown key '", key, "' (aah --help-config lists the keys)");
}

// json["a"]["b"] = v for key "a.b"; json["a"] = v for "a".
void put(json& j, const std::string& key, const json& v) {
  const size_t dot = key.find('.');
  if (dot == std::string::npos)
    j[key] = v;
  else
    j[key.substr(0, dot)][key.substr(dot + 1)] = v;
}

// HF config.json keys that describe the model but are not settable here; accepted and ignored on input.
bool ignored_key(const std::string& k) {
  static const char* keys[] = {"architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
                               "bos_token_id", "eos_token_id", "hidden_act", "initializer_range",
                               "max_position_embeddings", "max_window_layers", "rope_scaling", "sliding_window",
                               "use_cache", "use_sliding_window", "attention_bias", "attention_dropout",
                               "pad_token_id", "layer_types"};
  for (const char* s : keys)
    if (k == s) return true;
  return false;
}

// Ignored HF keys whose other values would change the model: refused rather than silently run differently.
void check_unsupported(const std::string& k, const json& v, const std::string& source) {
  auto refuse = [&](const char* why) { fail("[config] ", source, ": ", k, " = ", v.dump(), ": ", why); };
  if (k == "rope_scaling" && !v.is_null()) refuse("RoPE scaling is not supported (aah implements plain RoPE)");
  if (k == "use_sliding_window" && v != json(false)) refuse("HF sliding-window attention is not supported");
  if (k == "attention_bias" && v != json(false)) refuse("q/k/v/o projection biases are not supported (Qwen3 has none)");
  if (k == "hidden_act" && v != json("silu")) refuse("only silu (SwiGLU) is supported");
}

void apply_object(Config& cfg, const json& j, const std::string& prefix, const std::string& source) {
  for (auto& [k, v] : j.items()) {
    if (prefix.empty() && (k == "train" || k == "aah")) {
      if (!v.is_object()) fail("[config] ", source, ": key '", k, "' must be an object");
      // The regime first: it clears the knobs given with it.
      if (k == "aah" && v.contains("regime")) set_key(cfg, "aah.regime", v["regime"], source);
      apply_object(cfg, v, k + ".", source);
      continue;
    }
    if (prefix == "aah." && k == "regime") continue;  // done above
    if (prefix.empty() && ignored_key(k)) {
      check_unsupported(k, v, source);
      continue;
    }
    set_key(cfg, prefix + k, v, source);
  }
}

}  // namespace

const NameList kNonfiniteNames = {"skip", "stop"};
const NameList kAttentionNames = backend_user_names();  // the backend table's
const NameList kPrecisionNames = {"fp32", "bf16"};

ControllerConfig controller_config_of(const Config& cfg) {
  ControllerConfig c;
  c.windows = controller_default_windows(cfg.train.context);
  c.warmup_steps = cfg.train.warmup_steps;
  c.reuse_cache_step = cfg.train.warmup_steps;  // spec section 7 (revised): deep_reuse caches level 0 after warmup
  c.seed = uint64_t(cfg.train.seed);
  controller_apply_regime(c, cfg.aah.regime);
  for (const ConfigField& f : controller_knobs(c)) {  // the explicit knobs, on top of the regime
    auto it = cfg.aah.knobs.find(f.key.substr(4));
    if (it != cfg.aah.knobs.end()) field_assign(f, *it, "aah");
  }
  // A window covers at most the context: a larger one is an error, not a silent clamp.
  for (int w : c.windows)
    if (w > cfg.train.context)
      fail("[config] key 'aah.windows' has window ", w, ", larger than train.context = ", cfg.train.context);
  if (c.fixed_window > cfg.train.context)
    fail("[config] key 'aah.fixed_window' = ", c.fixed_window, " is larger than train.context = ", cfg.train.context,
         " (a window covers at most the context)");
  if (!c.windows.empty() && c.windows.back() != cfg.train.context)
    fail("[config] key 'aah.windows': the last window must equal train.context (", cfg.train.context, "), got ",
         c.windows.back());
  controller_validate(c);
  return c;
}

void config_lower_context(Config& cfg, int T) {
  const ControllerConfig c = controller_config_of(cfg);  // as resolved at the old context
  cfg.train.context = T;
  if (c.fixed_window > T) cfg.aah.knobs["fixed_window"] = T;
  // Default windows follow the context by themselves; explicit ones keep those below T and end at T.
  if (cfg.aah.knobs.contains("windows")) {
    std::vector<int> w;
    for (int x : c.windows)
      if (x < T) w.push_back(x);
    w.push_back(T);
    cfg.aah.knobs["windows"] = w;
  }
}

void config_apply_json(Config& cfg, const json& j, const std::string& source) {
  if (!j.is_object()) fail("[config] ", source, ": expected a JSON object");
  apply_object(cfg, j, "", source);
}

void config_set(Config& cfg, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) fail("[config] --set '", assignment, "': expected key=value");
  std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  // Values become JSON strings (config.json, error messages): they must be text.
  utf8_check(assignment, "[config] --set");
  ControllerConfig scratch;
  const std::vector<ConfigField> table = all_fields(cfg, scratch);
  const ConfigField* f = field_find(table, key);
  if (!f) fail("[config] --set: unknown key '", key, "' (aah --help-config lists the keys)");
  set_key(cfg, key, field_value_of_text(*f, text), "--set");
}

void config_validate(const Config& cfg) {
  Config copy = cfg;
  for (const ConfigField& f : fields(copy)) field_check(f, "[config]");
  // Relations the rows cannot state.
  const ModelConfig& m = cfg.model;
  const TrainConfig& t = cfg.train;
  auto need = [](bool ok, const char* key, const std::string& what) {
    if (!ok) fail("[config] key '", key, "' ", what);
  };
  need(m.num_attention_heads % m.num_key_value_heads == 0, "num_key_value_heads",
       str_cat("must divide num_attention_heads (", m.num_attention_heads, "), got ", m.num_key_value_heads));
  need(m.head_dim % 2 == 0, "head_dim", str_cat("must be even (RoPE rotates pairs), got ", m.head_dim));
  need(t.min_lr <= t.lr, "train.min_lr", str_cat("must be <= train.lr (", t.lr, "), got ", t.min_lr));
  controller_config_of(cfg);  // regime and knobs; errors name the aah.* key
  for (int step : t.checkpoint_steps)
    need(step <= t.steps, "train.checkpoint_steps",
         str_cat("has step ", step, ", past the last step train.steps = ", t.steps));
  // The parameter-count limit names the key whose term is largest: the embedding (vocab_size x hidden_size), the
  // attention projections or the MLP (intermediate_size), both times num_hidden_layers.
  const double embed = double(m.vocab_size) * m.hidden_size * (m.tie_word_embeddings ? 1 : 2);
  const double attn = double(m.num_hidden_layers) * m.hidden_size *
                      (double(m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim +
                       double(m.num_attention_heads) * m.head_dim);
  const double mlp = double(m.num_hidden_layers) * m.hidden_size * 3.0 * m.intermediate_size;
  const double params = embed + attn + mlp;
  const char* largest = embed >= attn && embed >= mlp ? "vocab_size" : mlp >= attn ? "intermediate_size" : "num_attention_heads";
  need(params < 2e9, largest,
       str_cat("makes the model too large: ", params / 1e9, "B parameters (embedding ", embed / 1e9, "B, attention ",
               attn / 1e9, "B, MLP ", mlp / 1e9, "B over num_hidden_layers = ", m.num_hidden_layers,
               "); aah trains up to 2B"));
}

json config_to_json(const Config& cfg) {
  Config copy = cfg;
  json j;
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["model_type"] = "qwen3";
  j["torch_dtype"] = "float32";
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["max_position_embeddings"] = cfg.train.context;
  for (const ConfigField& f : fields(copy)) put(j, f.key, field_json(f));
  // Every controller knob as resolved for this run (regime preset + explicit knobs), so config.json says exactly
  // what ran; reading it back gives the same controller.
  ControllerConfig resolved = controller_config_of(cfg);
  for (const ConfigField& f : controller_knobs(resolved)) put(j, f.key, field_json(f));
  // Default windows follow the context (T/8, T/4, T/2, T): keep them implicit so an evaluation at another
  // context rescales them, as it would for a fresh run.
  if (resolved.windows == controller_default_windows(cfg.train.context)) j["aah"].erase("windows");
  return j;
}

std::vector<std::pair<std::string, std::string>> config_describe(const Config& cfg) {
  Config copy = cfg;
  ControllerConfig resolved = controller_config_of(cfg);
  std::vector<std::pair<std::string, std::string>> out;
  for (const ConfigField& f : all_fields(copy, resolved)) {
    std::string line = json_shown(field_json(f)) + "  " + f.help;
    const std::string range = field_range_text(f);
    if (!range.empty()) line += " (" + range + ")";
    if (controller_knob_set_by_regimes(f.key)) line += " [set by aah.regime]";
    out.push_back({f.key, line});
  }
  std::string regimes;
  for (auto& r : controller_regime_names()) regimes += (regimes.empty() ? "" : ", ") + r;
  out.push_back({"aah.regime names", regimes});
  return out;
}

namespace {
std::string markdown_cell(std::string text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}
}  // namespace

std::string config_markdown() {
  Config cfg;
  ControllerConfig resolved = controller_config_of(cfg);
  std::string md =
      "# Configuration keys\n\n"
      "Written by `aah --help-config --markdown` from the key table (`fields()` in `src/model/config.cpp`, the\n"
      "controller's knobs in `controller_knobs()` of `src/controller/controller_config.cpp`); a test fails when this\n"
      "file differs from what the binary prints. Set a key with `--set key=value` or in a JSON config file, where\n"
      "`train.*` and `aah.*` keys nest as objects (see [configuration.md](configuration.md)). Defaults are those of\n"
      "`aah train` with regime `full`; keys marked *regime* are reset by every `aah.regime` (see\n"
      "[regimes.md](regimes.md)) before the knobs given after it apply.\n\n"
      "| key | default | range | meaning |\n|---|---|---|---|\n";
  for (const ConfigField& f : all_fields(cfg, resolved)) {
    std::string meaning = f.help;
    if (controller_knob_set_by_regimes(f.key)) meaning += " *(regime)*";
    md += "| `" + f.key + "` | `" + markdown_cell(json_shown(field_json(f))) + "` | " +
          markdown_cell(field_range_text(f)) + " | " + markdown_cell(meaning) + " |\n";
  }
  return md;
}

}  // namespace aah
