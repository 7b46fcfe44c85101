#include "bench/bench_decode.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_train.h"
#include "core/check.h"
#include "core/rng.h"
#include "core/sys.h"
#include "infer/decoder.h"
#include "model/engine.h"
#include "model/model.h"

namespace aah {

namespace {

// One window set: its own model (weights identical across sets) and a decoder made afresh every round.
struct DecodeSet {
  std::string name;
  std::vector<int> head_windows;  // (H) the same in every layer
  std::unique_ptr<Engine> engine;  // its model: weights from seed 0, windows set by hand
  Model<float>* model = nullptr;
  std::unique_ptr<Decoder> dec;
  std::string precision = "fp32";  // bf16: train.precision=bf16, whose decoder keeps its KV cache and weights in bf16
  double kv_bytes = 0, decode_attn_pairs = 0, window_ratio = 1;
};

}  // namespace

namespace {

constexpr int kDecodeSteps = 128;  // tokens decoded after the prompt
// The decode steps run in blocks that alternate between the sets (full block 1, mix block 1, full block 2, ...).
constexpr int kBlocks = 8;
static_assert(kDecodeSteps % kBlocks == 0);

// Full windows and the paper's final Full-adaptive mix (50.3% T/8, 20.1% T/4, 9.4% T/2, 20.1% T; on 8 heads 4 x T/8,
// 2 x T/4, 1 x T/2, 1 x T per layer), and with "bf16" among the precisions the same two with a bf16 KV cache.
std::vector<DecodeSet> decode_sets(int T, int H, const std::vector<std::string>& precisions) {
  std::vector<DecodeSet> sets(2);
  sets[0].name = "full", sets[0].head_windows = std::vector<int>(H, T);
  sets[1].name = "full_adaptive_mix", sets[1].head_windows = paper_adaptive_mix(T, H);
  if (std::find(precisions.begin(), precisions.end(), "bf16") != precisions.end())
    for (int si = 0; si < 2; si++) {
      DecodeSet s16;
      s16.name = sets[si].name + " bf16", s16.head_windows = sets[si].head_windows, s16.precision = "bf16";
      sets.push_back(std::move(s16));
    }
  return sets;
}

// The set's model (bench-c weights from seed 0, at its precision) with its windows in every layer.
void decode_set_prepare(DecodeSet& s, const ModelConfig& m, int T) {
  Config c;
  c.model = m;
  c.train.precision = s.precision;
  s.engine = std::make_unique<Engine>(c, EngineOptions(1, T).no_policy());
  s.model = &s.engine->model;
  const int L = m.num_hidden_layers, H = m.num_attention_heads;
  for (int l = 0; l < L; l++)
    for (int h = 0; h < H; h++) s.model->windows()[size_t(l) * H + h] = s.head_windows[h];
  double wsum = 0;
  for (int w : s.head_windows) wsum += double(w) / T;
  s.window_ratio = wsum / H;
}

// Cases: the prefill of each set (into a fresh decoder, made untimed), then the decode steps in blocks that alternate
// between the sets. A decode step takes a few ms, a prefill seconds: alternating small blocks puts the sets' decode
// steps close together in time, so that a drift of the machine's speed hits all, instead of one set decoding while
// another's prefill ran.
std::vector<MeasureCase> decode_cases(std::vector<DecodeSet>& sets, const std::vector<int32_t>& tokens, int T) {
  const int prompt = T - kDecodeSteps, block = kDecodeSteps / kBlocks;
  std::vector<MeasureCase> cases;
  for (DecodeSet& s : sets) {
    DecodeSet* p = &s;
    cases.push_back({s.name + " prefill", [p, &tokens, prompt] { p->dec->prefill(tokens.data(), prompt); },
                     [p, T] {
                       p->dec.reset();  // the old cache goes before the new one is allocated
                       p->dec = std::make_unique<Decoder>(*p->model, T);
                     }});
  }
  for (int bi = 0; bi < kBlocks; bi++)
    for (DecodeSet& s : sets) {
      DecodeSet* p = &s;
      const int first = prompt + bi * block;
      cases.push_back({s.name + " decode " + std::to_string(bi + 1), [p, &tokens, first, block] {
                         for (int i = first; i < first + block; i++) p->dec->step(tokens[i]);
                         p->kv_bytes = double(p->dec->cache().bytes());
                         p->decode_attn_pairs = p->dec->attention_pairs() / kDecodeSteps;
                       }});
    }
  return cases;
}

}  // namespace

int bench_decode(const BenchOptions& o, int T, const std::vector<std::string>& precisions) {
  const ModelConfig m = bench_c_model();
  const int steps = kDecodeSteps;
  if (T < 2 * steps) fail("bench decode: --context ", T, " is too short (at least ", 2 * steps, ")");
  const int prompt = T - steps;
  std::vector<DecodeSet> sets = decode_sets(T, m.num_attention_heads, precisions);
  Rng rng(1);
  std::vector<int32_t> tokens(T);
  for (auto& t : tokens) t = int32_t(rng.below(m.vocab_size));
  for (DecodeSet& s : sets) decode_set_prepare(s, m, T);
  const std::vector<MeasureCase> cases = decode_cases(sets, tokens, T);
  const int nsets = int(sets.size());
  MeasureOptions mo = o.measure;
  for (int si = 1; si < nsets; si++) mo.ratios.push_back({si, 0});  // prefill time vs full's (decode: below)
  const MeasureResult res = measure_interleaved(cases, mo);
  // Per round: the decode time of a set is the sum of its blocks.
  std::vector<std::vector<double>> decode_s(nsets);
  for (int si = 0; si < nsets; si++) {
    decode_s[si] = res.cases[nsets + si].samples;
    for (int bi = 1; bi < kBlocks; bi++)
      decode_s[si] = per_round_sum(decode_s[si], res.cases[nsets + bi * nsets + si].samples);
  }
  const double lim = res.spread_limit;
  // A decode step is memory-bound: it reads every weight once (the tied embedding as the output layer) and the
  // K and V rows of every visible pair. Predicted time ratio = bytes read with the set / bytes read with full.
  // At bf16 the decoder holds its weight matrices and its cache in bf16, 2 bytes per value (the norms' few weights,
  // fp32, counted at 2 as well).
  auto bytes_read = [&](const DecodeSet& s) {
    const double value_bytes = s.precision == "bf16" ? 2 : sizeof(float);
    return double(sets[0].model->num_params()) * value_bytes +
           s.decode_attn_pairs * 2.0 * m.head_dim * value_bytes * m.num_key_value_heads / m.num_attention_heads;
  };
  bool any_flag = false;
  for (size_t si = 0; si < sets.size(); si++) {
    const DecodeSet& s = sets[si];
    const SampleStats decode_tok_s = rate_stats(sample_stats(decode_s[si], lim), steps, lim);
    const SampleStats prefill_tok_s = rate_stats(res.cases[si], prompt, lim);
    const SampleStats time_ratio = ratio_stats(decode_s[si], decode_s[0], lim);
    const double kv_ratio = s.kv_bytes / sets[0].kv_bytes;
    const double predicted = bytes_read(s) / bytes_read(sets[0]);
    const bool flagged = decode_tok_s.flagged || prefill_tok_s.flagged || (si > 0 && time_ratio.flagged);
    any_flag = any_flag || flagged;
    if (o.json) {
      nlohmann::json j = {{"config", "bench-c"},
                          {"T", T},
                          {"prompt", prompt},
                          {"decoded", steps},
                          {"window_set", s.name},
                          {"precision", s.precision},
                          {"window_ratio", s.window_ratio},
                          {"kv_bytes", s.kv_bytes},
                          {"kv_ratio", kv_ratio},
                          {"decode_tokens_per_s", decode_tok_s.median},
                          {"time_ratio", time_ratio.median},
                          {"bytes_read_per_token", bytes_read(s)},
                          {"predicted_time_ratio", predicted},
                          {"prefill_tokens_per_s", prefill_tok_s.median},
                          {"decode_attention_pairs_per_token", s.decode_attn_pairs},
                          {"rounds", res.rounds},
                          {"threads", num_threads()}};
      j["stats"] = {{"decode_tokens_per_s", stats_json(decode_tok_s, o.samples)},
                    {"prefill_tokens_per_s", stats_json(prefill_tok_s, o.samples)},
                    {"time_ratio", stats_json(time_ratio, o.samples)}};
      j["flagged"] = flagged;
      std::printf("%s\n", j.dump().c_str());
    } else {
      if (si == 0)
        std::printf(
            "bench-c at context %d, decoding %d tokens after a %d-token prompt (%d thread%s), %d rounds, "
            "%.1f s\n%-22s %12s %9s %9s %12s %7s %10s %7s %9s %14s %7s\n",
            T, steps, prompt, num_threads(), num_threads() == 1 ? "" : "s", res.rounds, res.seconds, "window set",
            "KV bytes", "KV ratio", "W ratio", "decode tok/s", "spread", "time ratio", "spread", "predicted",
            "prefill tok/s", "spread");
      std::printf("%-22s %12.0f %9.3f %9.3f %11.1f%1s %6.1f%% %9.3f%1s %6.1f%% %9.3f %13.0f%1s %6.1f%%\n",
                  s.name.c_str(), s.kv_bytes, kv_ratio, s.window_ratio, decode_tok_s.median, flag_mark(decode_tok_s),
                  100 * decode_tok_s.spread, time_ratio.median, si > 0 ? flag_mark(time_ratio) : "",
                  100 * time_ratio.spread, predicted, prefill_tok_s.median, flag_mark(prefill_tok_s),
                  100 * prefill_tok_s.spread);
    }
  }
  if (!o.json) {
    std::printf(
        "predicted: memory-bound time ratio = bytes read per decoded token (weights %.1f MB once, plus K and V "
        "of the visible pairs; at bf16 weights and cache take 2 bytes a value) / the same with full fp32 windows\n",
        double(sets[0].model->num_params()) * sizeof(float) / 1e6);
    if (any_flag) print_flag_note(lim);
  }
  return 0;
}

}  // namespace aah
