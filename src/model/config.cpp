#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <variant>

#include "core/check.h"
#include "io/files.h"
#include "io/unicode.h"

namespace aah {

namespace {

using json = nlohmann::json;
using FieldPtr = std::variant<int*, int64_t*, double*, bool*, std::string*, std::vector<int>*>;

struct Field {
  std::string key;  // dotted name, e.g. "train.lr"
  FieldPtr ptr;
  const char* help;
};

std::vector<Field> fields(Config& c) {
  ModelConfig& m = c.model;
  TrainConfig& t = c.train;
  AahConfig& a = c.aah;
  return {
      {"hidden_size", &m.hidden_size, "model width C"},
      {"intermediate_size", &m.intermediate_size, "SwiGLU hidden width F"},
      {"num_hidden_layers", &m.num_hidden_layers, "number of decoder blocks L"},
      {"num_attention_heads", &m.num_attention_heads, "query heads H"},
      {"num_key_value_heads", &m.num_key_value_heads, "key/value heads (divides H; < H is grouped-query)"},
      {"head_dim", &m.head_dim, "per-head dimension D (even)"},
      {"vocab_size", &m.vocab_size, "vocabulary size V (must cover the data's tokenizer)"},
      {"rope_theta", &m.rope_theta, "RoPE base"},
      {"rms_norm_eps", &m.rms_norm_eps, "RMSNorm epsilon"},
      {"tie_word_embeddings", &m.tie_word_embeddings, "LM head shares the embedding matrix"},
      {"aah.qk_norm", &m.qk_norm, "per-head RMSNorm of q and k before RoPE (Qwen3)"},
      {"train.steps", &t.steps, "optimizer steps"},
      {"train.batch_size", &t.batch_size, "sequences per micro-batch"},
      {"train.context", &t.context, "tokens per sequence T"},
      {"train.grad_accum", &t.grad_accum, "micro-batches per optimizer step"},
      {"train.lr", &t.lr, "peak learning rate"},
      {"train.min_lr", &t.min_lr, "learning rate at the end of the cosine decay"},
      {"train.warmup_steps", &t.warmup_steps, "linear warmup steps"},
      {"train.weight_decay", &t.weight_decay, "AdamW decoupled weight decay (matrices only)"},
      {"train.beta1", &t.beta1, "AdamW beta1"},
      {"train.beta2", &t.beta2, "AdamW beta2"},
      {"train.adam_eps", &t.adam_eps, "AdamW epsilon"},
      {"train.grad_clip", &t.grad_clip, "global gradient-norm clip (0: off)"},
      {"train.seed", &t.seed, "seed of initialization and data sampling"},
      {"train.log_interval", &t.log_interval, "steps between metrics.jsonl lines"},
      {"train.eval_interval", &t.eval_interval, "steps between validation evaluations (0: only at the end)"},
      {"train.eval_windows", &t.eval_windows, "validation windows of context+1 tokens"},
      {"train.checkpoint_steps", &t.checkpoint_steps, "steps to checkpoint at, e.g. [1000,5000]"},
      {"train.checkpoint_interval", &t.checkpoint_interval, "also checkpoint every N steps (0: off)"},
      {"train.nonfinite", &t.nonfinite, "on a non-finite loss or gradient: skip the step, or stop"},
      {"train.spike_factor", &t.spike_factor,
       "log a loss_spike event when a step's loss exceeds this times its running mean (EMA; 0: off)"},
      {"aah.regime", &a.regime, "window policy preset: full, grouping_off, full_adaptive, shallow_freeze, deep_reuse, or a diagnostic variant (aah --help-config)"},
      {"aah.attention", &a.attention, "attention execution: local (tiled, skips masked work) or dense"},
  };
}

// Controller knobs: aah.<name> -> ControllerConfig field, with the JSON type each takes.
struct Knob {
  const char* name;
  const char* type;  // "int", "double", "bool", "string", "int_list"
  const char* help;
};
const Knob kKnobs[] = {
    {"windows", "int_list", "candidate windows, ascending, last = context (default context/8, /4, /2, /1)"},
    {"control_interval", "int", "optimizer steps between control updates (5)"},
    {"feature_ema", "double", "feature EMA alpha (0.9; 0 = off)"},
    {"resolution_ema", "double", "resolution EMA beta (0.15)"},
    {"tau", "double", "level-0 cosine clustering threshold (0.995)"},
    {"lambda", "double", "cosine_normdiff norm penalty (16)"},
    {"shape", "int_list", "hierarchy shape, e.g. [2,2,2,2]"},
    {"grouping", "bool", "level-0 grouping (false: grouping_off)"},
    {"joint_scorer", "bool", "wide joint sibling scorer replaces base logits for sibling pairs"},
    {"parent_clamp", "bool", "child window index <= parent's"},
    {"topology", "string", "recompute | freeze | reuse_level0 | fixed_random"},
    {"policy", "string", "controller | off | fixed | deterministic | random"},
    {"fixed_window", "int", "window of policy fixed"},
    {"shuffle_post_select", "bool", "permute final windows across heads at each update (diagnostic)"},
    {"freeze_after_warmup", "bool", "no control updates after train.warmup_steps"},
    {"ramp_steps", "int", "post-warmup ramp length (0 = off)"},
};

const Knob* find_knob(const std::string& name) {
  for (const Knob& k : kKnobs)
    if (name == k.name) return &k;
  return nullptr;
}

// A value as shown in an error message: JSON, invalid UTF-8 replaced (dump() would throw), long values cut.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

void set_knob(Config& cfg, const std::string& name, const json& v, const std::string& source) {
  const Knob* k = find_knob(name);
  if (!k) fail("[config] ", source, ": unknown key 'aah.", name, "' (aah --help-config lists the keys)");
  const std::string t = k->type;
  const bool ok = (t == "int" && v.is_number_integer()) || (t == "double" && v.is_number()) ||
                  (t == "bool" && v.is_boolean()) || (t == "string" && v.is_string()) ||
                  (t == "int_list" && v.is_array() &&
                   std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number_integer(); }));
  if (!ok) fail("[config] ", source, ": key 'aah.", name, "' must be of type ", t, ", got ", shown(v));
  auto fits_int = [](const json& e) {  // the knob is read back with get<int>()
    return e.is_number_unsigned() ? e.get<uint64_t>() <= uint64_t(INT32_MAX)
                                  : e.get<int64_t>() >= INT32_MIN && e.get<int64_t>() <= INT32_MAX;
  };
  if ((t == "int" && !fits_int(v)) || (t == "int_list" && !std::all_of(v.begin(), v.end(), fits_int)))
    fail("[config] ", source, ": key 'aah.", name, "' must be in 32-bit integer range, got ", shown(v));
  if (t == "double" && !std::isfinite(v.get<double>()))
    fail("[config] ", source, ": key 'aah.", name, "' must be finite");
  cfg.aah.knobs[name] = v;
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

// The integer value of v (an integer, or a float with an integral value) if it fits a signed integer of `bits` (32
// or 64) bits; else bad(what).
template <class Bad>
int64_t integer_of(const json& v, int bits, Bad&& bad) {
  const int64_t hi = bits == 32 ? INT32_MAX : INT64_MAX, lo = -hi - 1;
  const char* what = bits == 32 ? "an integer in 32-bit range" : "an integer in 64-bit range";
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t(hi)) bad(what);
    return int64_t(v.get<uint64_t>());
  }
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) bad(what);
    return x;
  }
  if (v.is_number_float()) {
    const double x = v.get<double>();
    // Range-checked as doubles (lo and -lo are powers of two, exact) before converting: converting an
    // out-of-range double to an integer is undefined.
    if (!(std::floor(x) == x && x >= double(lo) && x < -double(lo))) bad(what);
    return int64_t(x);
  }
  bad("an integer");
  return 0;
}

void assign(const Field& f, const json& v, const std::string& source) {
  auto bad = [&](const char* want) {
    fail("[config] ", source, ": key '", f.key, "' must be ", want, ", got ", shown(v));
  };
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) bad("true or false");
          *p = v.get<bool>();
        } else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) {
          *p = T(integer_of(v, std::is_same_v<T, int> ? 32 : 64, bad));
        } else if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) bad("a number");
          double x = v.get<double>();
          if (!std::isfinite(x)) bad("a finite number");
          *p = x;
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) bad("a string");
          *p = v.get<std::string>();
        } else {
          auto bad_list = [&](const char*) { bad("a list of 32-bit integers"); };
          if (v.is_number()) {
            *p = {int(integer_of(v, 32, bad_list))};
            return;
          }
          if (!v.is_array()) bad_list("");
          std::vector<int> list;
          for (auto& e : v) list.push_back(int(integer_of(e, 32, bad_list)));
          *p = std::move(list);
        }
      },
      f.ptr);
}

json field_value(const Field& f) {
  return std::visit([](auto* p) { return json(*p); }, f.ptr);
}

const Field* find_field(const std::vector<Field>& fs, const std::string& key) {
  for (auto& f : fs)
    if (f.key == key) return &f;
  return nullptr;
}

void apply_object(Config& cfg, const std::vector<Field>& fs, const json& j, const std::string& prefix,
                  const std::string& source) {
  for (auto& [k, v] : j.items()) {
    std::string key = prefix + k;
    if (prefix.empty() && (k == "train" || k == "aah")) {
      if (!v.is_object()) fail("[config] ", source, ": key '", k, "' must be an object");
      if (k == "aah" && v.contains("regime")) {  // the regime first: it resets the knobs given with it
        assign(*find_field(fs, "aah.regime"), v["regime"], source);
        cfg.aah.knobs = json::object();
      }
      apply_object(cfg, fs, v, k + ".", source);
      continue;
    }
    if (prefix == "aah." && k == "regime") continue;  // done above
    if (prefix == "aah." && !find_field(fs, key)) {
      set_knob(cfg, k, v, source);
      continue;
    }
    if (prefix.empty() && ignored_key(k)) {
      check_unsupported(k, v, source);
      continue;
    }
    const Field* f = find_field(fs, key);
    if (!f) fail("[config] ", source, ": unknown key '", key, "' (aah --help-config lists the keys)");
    assign(*f, v, source);
  }
}

}  // namespace

ControllerConfig controller_config_of(const Config& cfg) {
  ControllerConfig c;
  c.windows = controller_default_windows(cfg.train.context);
  c.warmup_steps = cfg.train.warmup_steps;
  c.seed = uint64_t(cfg.train.seed);
  controller_apply_regime(c, cfg.aah.regime);
  for (auto& [name, v] : cfg.aah.knobs.items()) {
    if (name == "windows") c.windows = v.get<std::vector<int>>();
    else if (name == "control_interval") c.control_interval = v.get<int>();
    else if (name == "feature_ema") c.feature_ema = v.get<double>();
    else if (name == "resolution_ema") c.resolution_ema = v.get<double>();
    else if (name == "tau") c.tau = v.get<double>();
    else if (name == "lambda") c.lambda = v.get<double>();
    else if (name == "shape") c.shape = v.get<std::vector<int>>();
    else if (name == "grouping") c.grouping = v.get<bool>();
    else if (name == "joint_scorer") c.joint_scorer = v.get<bool>();
    else if (name == "parent_clamp") c.parent_clamp = v.get<bool>();
    else if (name == "topology") c.topology = topology_mode_from_string(v.get<std::string>());
    else if (name == "policy") c.policy = window_policy_from_string(v.get<std::string>());
    else if (name == "fixed_window") c.fixed_window = v.get<int>();
    else if (name == "shuffle_post_select") c.shuffle_post_select = v.get<bool>();
    else if (name == "freeze_after_warmup") c.freeze_after_warmup = v.get<bool>();
    else if (name == "ramp_steps") c.ramp_steps = v.get<int>();
  }
  if (!c.windows.empty() && c.windows.back() != cfg.train.context)
    fail("[config] key 'aah.windows': the last window must equal train.context (", cfg.train.context, "), got ",
         c.windows.back());
  controller_validate(c);
  return c;
}

void config_apply_json(Config& cfg, const json& j, const std::string& source) {
  if (!j.is_object()) fail("[config] ", source, ": expected a JSON object");
  apply_object(cfg, fields(cfg), j, "", source);
}

void config_set(Config& cfg, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) fail("[config] --set '", assignment, "': expected key=value");
  std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  // Values become JSON strings (config.json, error messages): they must be text.
  utf8_check(assignment, "[config] --set");
  auto fs = fields(cfg);
  const Field* f = find_field(fs, key);
  // The value as JSON; bare words (and anything else that is not JSON) are strings.
  auto value_of = [&](bool string_field) -> json {
    if (string_field) return text;
    try {
      return parse_json(text, "--set", "[config]");
    } catch (const Error&) {
      return text;
    }
  };
  if (!f && key.rfind("aah.", 0) == 0) {
    const Knob* knob = find_knob(key.substr(4));
    json v = value_of(knob && std::string(knob->type) == "string");
    set_knob(cfg, key.substr(4), v, "--set");
    return;
  }
  if (!f) fail("[config] --set: unknown key '", key, "' (aah --help-config lists the keys)");
  if (key == "aah.regime") cfg.aah.knobs = json::object();  // a regime is a complete preset
  assign(*f, value_of(std::holds_alternative<std::string*>(f->ptr)), "--set");
}

void config_validate(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  const TrainConfig& t = cfg.train;
  auto need = [](bool ok, const char* key, const std::string& what) {
    if (!ok) fail("[config] key '", key, "' ", what);
  };
  need(m.hidden_size > 0, "hidden_size", "must be > 0");
  need(m.intermediate_size > 0, "intermediate_size", "must be > 0");
  need(m.num_hidden_layers > 0, "num_hidden_layers", "must be > 0");
  need(m.num_attention_heads > 0, "num_attention_heads", "must be > 0");
  need(m.num_key_value_heads > 0 && m.num_attention_heads % m.num_key_value_heads == 0, "num_key_value_heads",
       str_cat("must divide num_attention_heads (", m.num_attention_heads, "), got ", m.num_key_value_heads));
  need(m.head_dim > 0 && m.head_dim % 2 == 0, "head_dim", "must be even and > 0 (RoPE rotates pairs)");
  need(m.vocab_size > 1, "vocab_size", "must be > 1");
  need(m.rope_theta > 0, "rope_theta", "must be > 0");
  need(m.rms_norm_eps > 0, "rms_norm_eps", "must be > 0");
  need(t.steps > 0, "train.steps", "must be > 0");
  need(t.batch_size > 0, "train.batch_size", "must be > 0");
  need(t.context > 0, "train.context", "must be > 0");
  need(t.grad_accum > 0, "train.grad_accum", "must be > 0");
  need(t.lr > 0, "train.lr", "must be > 0");
  need(t.min_lr >= 0 && t.min_lr <= t.lr, "train.min_lr", "must be in [0, train.lr]");
  need(t.warmup_steps >= 0, "train.warmup_steps", "must be >= 0");
  need(t.weight_decay >= 0, "train.weight_decay", "must be >= 0");
  need(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", "must be in [0, 1)");
  need(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", "must be in [0, 1)");
  need(t.adam_eps > 0, "train.adam_eps", "must be > 0");
  need(t.grad_clip >= 0, "train.grad_clip", "must be >= 0");
  need(t.log_interval > 0, "train.log_interval", "must be > 0");
  need(t.eval_interval >= 0, "train.eval_interval", "must be >= 0");
  need(t.eval_windows > 0, "train.eval_windows", "must be > 0");
  need(t.checkpoint_interval >= 0, "train.checkpoint_interval", "must be >= 0");
  for (int s : t.checkpoint_steps) need(s > 0, "train.checkpoint_steps", "entries must be > 0");
  need(t.nonfinite == "skip" || t.nonfinite == "stop", "train.nonfinite", "must be skip or stop");
  need(t.spike_factor == 0 || t.spike_factor > 1, "train.spike_factor", "must be 0 (off) or > 1");
  controller_config_of(cfg);  // regime and knobs; errors name the aah.* key
  need(cfg.aah.attention == "local" || cfg.aah.attention == "dense", "aah.attention", "must be local or dense");
  const double params = double(m.vocab_size) * m.hidden_size * (m.tie_word_embeddings ? 1 : 2) +
                        double(m.num_hidden_layers) * m.hidden_size *
                            (double(m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim +
                             double(m.num_attention_heads) * m.head_dim + 3.0 * m.intermediate_size);
  need(params < 2e9, "hidden_size", str_cat("gives ", params / 1e9, "B parameters; aah trains up to 2B"));
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
  for (auto& f : fields(copy)) {
    auto dot = f.key.find('.');
    if (dot == std::string::npos)
      j[f.key] = field_value(f);
    else
      j[f.key.substr(0, dot)][f.key.substr(dot + 1)] = field_value(f);
  }
  // Every controller knob as resolved for this run (regime preset + explicit knobs), so config.json says exactly
  // what ran; reading it back gives the same controller.
  const json resolved = controller_config_to_json(controller_config_of(cfg));
  for (const Knob& k : kKnobs)
    if (resolved.contains(k.name)) j["aah"][k.name] = resolved[k.name];
  // Default windows follow the context (T/8, T/4, T/2, T): keep them implicit so an evaluation at another
  // context rescales them, as it would for a fresh run.
  if (resolved["windows"] == json(controller_default_windows(cfg.train.context))) j["aah"].erase("windows");
  return j;
}

std::vector<std::pair<std::string, std::string>> config_describe(const Config& cfg) {
  Config copy = cfg;
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& f : fields(copy)) out.push_back({f.key, str_cat(field_value(f).dump(), "  ", f.help)});
  for (const Knob& k : kKnobs) out.push_back({str_cat("aah.", k.name), str_cat("(", k.type, ")  ", k.help)});
  std::string regimes;
  for (auto& r : controller_regime_names()) regimes += (regimes.empty() ? "" : ", ") + r;
  out.push_back({"aah.regime names", regimes});
  return out;
}

}  // namespace aah
