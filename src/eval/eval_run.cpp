#include "eval/eval_run.h"

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <map>
#include <optional>

#include "core/check.h"
#include "core/sys.h"
#include "eval/eval.h"
#include "eval/far_copy.h"
#include "eval/retrieval.h"
#include "core/files.h"
#include "formats/safetensors.h"
#include "data/shard.h"
#include "data/synth.h"
#include "text/tokenizer.h"
#include "model/config.h"
#include "model/engine.h"
#include "model/weights.h"
#include "model/attention_work.h"
#include "model/window_policy.h"

namespace aah {

namespace {

// A Hugging Face directory's config.json has no train block: without --set train.context=N it is evaluated at the
// model's max_position_embeddings, capped at kHfContextCap and halved while a micro-batch's activations would take
// more than half of the available memory. Returns 0 when the directory's config (or --set) gives the context.
constexpr int kHfContextCap = 8192;
int hf_context(const std::string& run, const nlohmann::json& raw, const Config& cfg,
               const std::vector<std::string>& sets) {
  if (raw.contains("train") && raw["train"].is_object() && raw["train"].contains("context")) return 0;
  for (auto& s : sets)
    if (s.rfind("train.context=", 0) == 0) return 0;
  const auto mpe = raw.find("max_position_embeddings");
  if (mpe == raw.end() || !mpe->is_number_integer() || mpe->get<int64_t>() < 1) return 0;
  const int64_t limit = mpe->get<int64_t>();
  int T = int(std::min<int64_t>(limit, kHfContextCap));
  const size_t budget = available_memory_bytes() / 2;
  while (T > 256 && Model<float>::estimate_bytes(cfg.model, cfg.train.batch_size, T, false) > budget) T /= 2;
  std::fprintf(stderr,
               "[eval] %s/config.json has no train.context: evaluating at context %d (max_position_embeddings %lld, "
               "capped at %d and so that a micro-batch of %d fits in half the available memory, %.0f MB; "
               "--set train.context=N chooses)\n",
               run.c_str(), T, (long long)limit, kHfContextCap, cfg.train.batch_size, budget / 1e6);
  return T;
}

// --set on top of the run's config, and a Hugging Face directory's evaluation context (hf_context).
void eval_apply_sets(const EvalRunOptions& o, Config& cfg) {
  for (auto& s : o.sets) config_set(cfg, s);
  if (const int T = hf_context(o.run, read_json_file(o.run + "/config.json"), cfg, o.sets)) cfg.train.context = T;
  config_validate(cfg);
}

// The evaluated tokens: --data DIR's val.bin, or --text FILE (any UTF-8 text) tokenized with the run's tokenizer.
TokenShard eval_tokens(const EvalRunOptions& o, const Config& cfg) {
  if (o.data.empty() == o.text.empty()) fail("[eval] give exactly one of --data DIR or --text FILE");
  TokenShard val;
  if (!o.text.empty()) {  // any UTF-8 text, tokenized with the run's tokenizer
    const std::string tok_path = o.run + "/tokenizer.json";
    if (!path_exists(tok_path)) fail("[eval] ", o.run, ": no tokenizer.json to tokenize ", o.text);
    val.path = o.text;
    val.tokens = Tokenizer::load(tok_path).encode(read_file(o.text));
    val.vocab_size = 0;
    for (int32_t id : val.tokens) val.vocab_size = std::max<uint32_t>(val.vocab_size, uint32_t(id) + 1);
  } else {
    val = shard_read(o.data + "/val.bin");
  }
  if (int64_t(val.vocab_size) > cfg.model.vocab_size)
    fail("[eval] ", val.path, " has vocabulary ", val.vocab_size, " but the model's is ", cfg.model.vocab_size);
  return val;
}

// A text shorter than one window of context+1 tokens is evaluated as one window of all its tokens; the windows of
// the regime follow.
void eval_fit_context(Config& cfg, const TokenShard& val) {
  if (int64_t(val.tokens.size()) >= int64_t(cfg.train.context) + 1) return;
  if (val.tokens.size() < 2) fail("[eval] ", val.path, " has ", val.tokens.size(), " tokens: need at least 2");
  std::fprintf(stderr,
               "[eval] %s has %zu tokens, fewer than train.context+1 = %d: evaluating one window of context %zu\n",
               val.path.c_str(), val.tokens.size(), cfg.train.context + 1, val.tokens.size() - 1);
  config_lower_context(cfg, int(val.tokens.size()) - 1);
  config_validate(cfg);
}

// Whether the windows are the checkpoint's cached decisions (`state`, when the run was trained under this regime);
// otherwise (a pretrained model, or --set aah.regime=...) the regime's controller, with its seeded scorers, decides
// them during evaluation: every evaluation batch is a control update, starting from full windows.
bool eval_restores_windows(const std::string& run, const std::string& state, const Config& cfg,
                           const std::string& run_regime) {
  // A run's state that is there but unreadable (a dangling link, no permission, corrupt) is an error, never a
  // silent re-decision of the windows; so is a trained run evaluated under its own regime without one.
  const bool state_present = std::filesystem::exists(std::filesystem::symlink_status(state));
  if (!state_present && dir_kind(run) == DirKind::run && cfg.aah.regime == run_regime)
    fail("[eval] ", state, " is missing: the run's windows cannot be restored (--set aah.regime=NAME evaluates ",
         "the model under a controller that decides its own windows)");
  std::optional<SafetensorsReader> reader;
  if (state_present) reader.emplace(state);
  const bool restore =
      reader && reader->metadata().count("regime") && reader->metadata().at("regime") == cfg.aah.regime;
  if (!restore && controller_config_of(cfg).policy == WindowPolicy::oracle)
    fail("[eval] regime ", cfg.aah.regime, ": policy oracle's windows come from a training run's cut probe of its ",
         "base (aah train with train.init_from); evaluate such a run under its own regime");
  return restore;
}

// Per token id, its count over the first `evaluated` tokens (the far-copy probe's frequency classes).
std::vector<int64_t> evaluated_token_counts(const TokenShard& val, int64_t evaluated, int model_vocab) {
  std::vector<int64_t> token_count(size_t(std::max<int64_t>(val.vocab_size, model_vocab)), 0);
  for (int64_t i = 0; i < evaluated; i++) {
    const int32_t t = val.tokens[size_t(i)];
    if (t >= 0 && size_t(t) < token_count.size()) token_count[size_t(t)]++;
  }
  return token_count;
}

// What the evaluated micro-batches add up to: the windows executed, the pairs, the full-window work and the time
// after the first micro-batch.
struct EvalTally {
  std::map<int, double> executions;  // window -> (layer, head, sequence) executions
  double pair_sum = 0, rows_sum = 0, full_macs = 0;
  double t_warm = 0;
  int64_t warm_tokens = 0;

  void add(const Controller& controller, int mb, int rows, int T, int L, double full_macs_per_row) {
    for (int l = 0; l < L; l++)
      for (int w : controller.windows(l)) executions[std::min(w, T)] += rows;
    pair_sum += controller.exact_pair_ratio(T) * rows;
    rows_sum += rows;
    full_macs += full_macs_per_row * rows;
    if (mb == 0)
      t_warm = now_seconds();
    else
      warm_tokens += int64_t(rows) * T;
  }

  // {"W": the fraction of executions with window W}; *acr: their mean window over T.
  nlohmann::json window_fractions(int T, double* acr) const {
    double total = 0;
    *acr = 0;
    for (auto [w, n] : executions) total += n;
    nlohmann::json fractions = nlohmann::json::object();
    for (auto [w, n] : executions) {
      fractions[std::to_string(w)] = n / total;
      *acr += n / total * double(w) / T;
    }
    return fractions;
  }
};

// The windows in force at the end, (layer, head), clamped to the context.
nlohmann::json window_map_json(const Controller& controller, int L, int T) {
  nlohmann::json map = nlohmann::json::array();
  for (int l = 0; l < L; l++) {
    std::vector<int> row = controller.windows(l);
    for (int& w : row) w = std::min(w, T);
    map.push_back(row);
  }
  return map;
}

// Loss by position: the mean loss of positions [start, start + bucket) over the windows (the last bucket may be
// shorter when the bucket does not divide the context).
nlohmann::json loss_by_position_json(const EvalResult& r, int T, int P) {
  nlohmann::json starts = nlohmann::json::array(), pos_loss = nlohmann::json::array(),
                 pos_tokens = nlohmann::json::array();
  for (int s = 0; s < T; s += P) {
    const int e = std::min(T, s + P);
    double sum = 0;
    for (int t = s; t < e; t++) sum += r.position_loss_sum[size_t(t)];
    const int64_t n = int64_t(r.windows) * (e - s);
    starts.push_back(s);
    pos_loss.push_back(sum / double(n));
    pos_tokens.push_back(n);
  }
  return {{"bucket", P}, {"start", starts}, {"loss", pos_loss}, {"tokens", pos_tokens}};
}

}  // namespace

nlohmann::json eval_run(const EvalRunOptions& o) {
  if (o.position_bucket < 1)
    fail("[eval] --position-bucket ", o.position_bucket, ": must be a positive number of tokens");
  Config cfg = run_config_load(o.run);
  const std::string run_regime = cfg.aah.regime;
  eval_apply_sets(o, cfg);
  const TokenShard val = eval_tokens(o, cfg);
  const Config run_cfg = cfg;  // at the run's context: what its controller state was saved under
  eval_fit_context(cfg, val);
  const int T = cfg.train.context, L = cfg.model.num_hidden_layers;
  // No larger micro-batch than there are windows (logits rows are V wide: 151,936 floats each for Qwen3).
  const int64_t n_windows = std::min<int64_t>((int64_t(val.tokens.size()) - 1) / T, cfg.train.eval_windows);
  const int batch = int(std::min<int64_t>(cfg.train.batch_size, n_windows));
  const std::string state = o.run + "/controller_state.safetensors";
  const bool restore = eval_restores_windows(o.run, state, cfg, run_regime);
  // The run's own windows are restored in the terms of its own context (its candidate windows); a shorter text runs
  // them clamped to its context (a window >= T is full attention there).
  Engine engine(restore ? run_cfg : cfg, EngineOptions(batch, T).load(o.run).restore(restore ? state : ""));
  Model<float>& model = engine.model;
  WindowPolicyRunner& policy = *engine.policy;
  const bool decide = !restore;
  const Controller& controller = policy.controller();
  const int interval = controller.config().control_interval;
  const double full_macs_per_row = double(full_window_attention_macs(cfg.model, T, *model.backend, false)) * L;
  EvalTally tally;
  const uint64_t macs0 = model.counters.macs;
  // Retrieval of the synth corpus's questions, scored after each micro-batch's forward.
  const bool synth = !o.data.empty() && synth_is_corpus(o.data);
  std::vector<RetrievalBucket> retrieval = retrieval_buckets(controller.config().windows);
  // Far copies on any corpus (far_copy.h), frequency classes from the evaluated tokens.
  const int64_t evaluated = std::min<int64_t>(int64_t(val.tokens.size()), n_windows * T + 1);
  FarCopyProbe far_copy(controller.config().windows, evaluated_token_counts(val, evaluated, cfg.model.vocab_size));
  const EvalResult r =
      eval_loss(model, val.tokens, T, cfg.train.eval_windows, batch, [&](int mb, int rows, bool before) {
        if (before) {
          policy.begin_forward(mb * interval, decide);
          for (int& w : model.windows()) w = std::min(w, T);
          return;
        }
        policy.end_forward();
        for (int b = 0; b < rows; b++) {
          const int32_t* inputs = val.tokens.data() + (int64_t(mb) * batch + b) * T;
          far_copy.add(inputs, inputs + 1, model.losses() + int64_t(b) * T, T);
        }
        if (synth) {  // eval_loss's windows: w starts at token w T, micro-batch mb holds windows mb batch ...
          const int32_t* inputs = val.tokens.data() + int64_t(mb) * batch * T;
          retrieval_score_forward(retrieval, model, inputs, inputs + 1, rows, T);
        }
        tally.add(controller, mb, rows, T, L, full_macs_per_row);
      });
  const double t_end = now_seconds();
  double acr = 0;
  const nlohmann::json fractions = tally.window_fractions(T, &acr);
  nlohmann::json out = {
      {"regime", cfg.aah.regime},
      {"val_loss", r.loss},
      {"val_ppl", r.ppl},
      {"tokens", r.tokens},
      {"windows", r.windows},
      {"context", T},
      {"inference_acr", acr},
      {"window_fractions", fractions},
      {"pair_ratio", tally.pair_sum / tally.rows_sum},
      {"attn_work_ratio", double(model.counters.macs - macs0) / tally.full_macs},
      {"tokens_per_s",
       tally.warm_tokens > 0 ? tally.warm_tokens / std::max(1e-9, t_end - tally.t_warm) : r.tokens_per_s},
      {"peak_rss_mb", peak_rss_mb()},
      {"window_map", window_map_json(controller, L, T)},
      {"windows_decided_at_eval", decide},
      {"loss_by_position", loss_by_position_json(r, T, o.position_bucket)}};
  out["far_copy"] = far_copy.json();
  if (synth) out["retrieval"] = retrieval_json(retrieval);
  return out;
}

}  // namespace aah
