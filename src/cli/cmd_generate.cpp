// aah generate: stream text from a run's model with its per-head KV cache.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/check.h"
#include "core/sys.h"
#include "infer/decoder.h"
#include "infer/sampler.h"
#include "core/files.h"
#include "formats/safetensors.h"
#include "text/tokenizer.h"
#include "model/engine.h"
#include "model/weights.h"
#include "model/window_policy.h"

namespace aah {

namespace {

struct GenerateOptions {
  std::string run, prompt;
  int max_new = 100;
  SamplerOptions sampler;
  std::vector<std::string> sets;
  std::string logprobs;  // --logprobs FILE: one JSON line per new token
};

// log p(token) under the model's distribution at temperature 1 (before top-k / top-p), in double.
double token_logprob(const float* logits, int V, int32_t token) {
  double mx = -INFINITY, sum = 0;
  for (int j = 0; j < V; j++) mx = std::max(mx, double(logits[j]));
  for (int j = 0; j < V; j++) sum += std::exp(double(logits[j]) - mx);
  return double(logits[token]) - mx - std::log(sum);
}

// Every number range-checked, the flag named: a value outside its meaning is an error, never a silent greedy or 1.
void generate_validate(const GenerateOptions& o) {
  constexpr int kMaxNew = 1 << 20;
  if (o.max_new < 1 || o.max_new > kMaxNew)
    fail("[generate] --max-new must be in [1, ", kMaxNew, "], got ", o.max_new);
  const SamplerOptions& s = o.sampler;
  if (!(s.temperature >= 0 && s.temperature <= 100))
    fail("[generate] --temperature must be in [0, 100] (0: greedy), got ", s.temperature);
  if (!o.logprobs.empty() && path_exists(o.logprobs))
    fail("[generate] --logprobs ", o.logprobs, ": exists; aah writes only new files (remove it or name another)");
  if (s.top_k < 0) fail("[generate] --top-k must be >= 0 (0: all tokens), got ", s.top_k);
  if (!(s.top_p > 0 && s.top_p <= 1)) fail("[generate] --top-p must be in (0, 1] (1: off), got ", s.top_p);
}

int run_generate(const GenerateOptions& o) {
  generate_validate(o);
  Config cfg = run_config_load(o.run);
  for (auto& s : o.sets) config_set(cfg, s);
  config_validate(cfg);
  const std::string tok_path = o.run + "/tokenizer.json";
  if (!path_exists(tok_path)) fail("[generate] ", o.run, ": no tokenizer.json (copy the data's tokenizer.json there)");
  Tokenizer tok = Tokenizer::load(tok_path);
  std::vector<int32_t> ids = tok.encode(o.prompt);
  if (ids.empty()) fail("[generate] the prompt encodes to no tokens");
  for (int32_t id : ids)
    if (id >= cfg.model.vocab_size)
      fail("[generate] prompt token ", id, " is outside the model's vocabulary (", cfg.model.vocab_size, ")");
  const int positions = int(ids.size()) + o.max_new;
  // The windows in force at the checkpoint (restored by the policy, which then leaves: decoding changes none).
  const std::string state = o.run + "/controller_state.safetensors";
  Engine engine(cfg, EngineOptions(1, std::min(positions, cfg.train.context))
                         .load(o.run)
                         .restore(path_exists(state) ? state : ""));
  engine.policy.reset();
  Model<float>& model = engine.model;
  Decoder dec(model, positions);
  Sampler sampler(o.sampler);
  const double t0 = now_seconds();
  const float* logits = dec.prefill(ids.data(), int(ids.size()));
  const double t_prefill = now_seconds() - t0;
  // Print the prompt, then what each new token completes (a token may end inside a UTF-8 character). The tokens
  // since the last print are decoded with one token before them as context (a decoder may treat a sequence's first
  // token apart), so each step decodes a few tokens, not the whole output; should that context not reproduce the
  // text (a tokenizer whose decode is not a concatenation), the whole output is decoded instead.
  std::vector<int32_t> out = ids;
  std::string text = tok.decode(out);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  size_t printed = text.size();   // bytes of the whole output printed
  size_t base = out.size();       // tokens before `base` are printed in full
  auto context_of = [&](size_t b) { return b > 0 ? tok.decode(std::span(out).subspan(b - 1, 1)) : std::string(); };
  std::string context = context_of(base);
  const double t1 = now_seconds();
  // A model may have more rows than its tokenizer has ids (vocab_size rounded up): never emit one it cannot decode.
  const int sample_V = std::min(cfg.model.vocab_size, int(tok.vocab_size()));
  std::string logprob_lines;
  for (int i = 0; i < o.max_new; i++) {
    const int32_t next = sampler.sample(logits, sample_V);
    if (!o.logprobs.empty())
      logprob_lines += nlohmann::json{{"i", i}, {"token", next}, {"logprob", token_logprob(logits, sample_V, next)}}.dump() + "\n";
    out.push_back(next);
    std::string fresh;  // the text of out[base..]
    const std::string tail = tok.decode(std::span(out).subspan(base > 0 ? base - 1 : 0));
    if (tail.compare(0, context.size(), context) == 0) {
      fresh = tail.substr(context.size());
    } else {
      const std::string all = tok.decode(out);
      fresh = all.size() > printed ? all.substr(printed) : std::string();
    }
    if (!fresh.empty() && (fresh.back() & 0xC0) != 0x80 && (unsigned char)fresh.back() < 0xC0) {
      std::fputs(fresh.c_str(), stdout);
      std::fflush(stdout);
      printed += fresh.size();
      base = out.size();
      context = context_of(base);
    }
    if (i + 1 < o.max_new) logits = dec.step(next);
  }
  const double t_decode = now_seconds() - t1;
  std::printf("\n");
  if (!o.logprobs.empty()) write_file_atomic(o.logprobs, logprob_lines);
  std::fprintf(stderr, "[generate] prompt %zu tokens (%.0f tokens/s prefill), %d new (%.1f tokens/s), KV cache %.2f MB\n",
               ids.size(), ids.size() / std::max(1e-9, t_prefill), o.max_new, o.max_new / std::max(1e-9, t_decode),
               dec.cache().bytes() / 1048576.0);
  return 0;
}

}  // namespace

void add_generate_commands(CLI::App& app, int& rc) {
  auto* gen = app.add_subcommand("generate", "Generate text from a run's model, streaming, with its per-head KV cache");
  static GenerateOptions o;
  gen->add_option("--run", o.run, "Run directory (config.json, model.safetensors, tokenizer.json)")->required();
  gen->add_option("--prompt", o.prompt, "Prompt text")->required();
  gen->add_option("--max-new", o.max_new, "Tokens to generate")->capture_default_str();
  gen->add_option("--temperature", o.sampler.temperature, "Sampling temperature (0: greedy)")->capture_default_str();
  gen->add_option("--top-k", o.sampler.top_k, "Keep the k most probable tokens (0: all)")->capture_default_str();
  gen->add_option("--top-p", o.sampler.top_p, "Keep the smallest set with this probability mass")->capture_default_str();
  gen->add_option("--seed", o.sampler.seed, "Sampling seed")->capture_default_str();
  gen->add_option("--set", o.sets, "Override a config key");
  gen->add_option("--logprobs", o.logprobs,
                  "Write FILE (new): one JSON line per generated token, {i, token, logprob} (log-probability under "
                  "the model at temperature 1, before top-k / top-p)");
  gen->callback([&rc] { rc = run_generate(o); });
}

}  // namespace aah
