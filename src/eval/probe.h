// `aah probe heads`: which heads retrieve. On a synth corpus's validation windows, for the run's model at full
// windows, per (layer, head): the attention mass that the query predicting a question's value (the key in
// `ASK k`) puts on its DEF's three tokens (DEF k v), averaged over the questions; and how much retrieval accuracy
// drops when that head alone is cut to the smallest candidate window (every other head full).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/shard.h"
#include "model/config.h"

namespace aah {

// Attention probability mass of head h's query at position `query` on the keys [k0, k1): softmax(q k^T / sqrt(D))
// over the keys visible under `window` (attn_visible), summed over [k0, k1) (a key outside the window adds 0).
// q (H, T, D) and k (Hkv, T, D) of one sequence, as the model's before_attention hook sees them.
double attn_mass(const float* q, const float* k, int H, int Hkv, int T, int D, int h, int window, int query, int k0,
                 int k1);

struct ProbeHeadsOptions {
  std::string run;                // run directory (or Hugging Face directory)
  std::string data;               // synth corpus directory (val.bin, meta.json)
  std::vector<std::string> sets;  // --set key=value on top of the run's config
};

// {"heads": [{"layer", "head", "def_mass", "accuracy_drop"}, ...] (layer-major), "accuracy_full",
//  "questions" (counted questions), "context", "cut_window" (the smallest candidate window)}.
nlohmann::json probe_heads(const ProbeHeadsOptions& opt);

// The oracle control (policy oracle): on the validation windows of a synth corpus (val, as probe_heads reads it),
// the model of cfg with the weights in weights_dir, each head n (layer-major) alone cut to each candidate window
// W_k, every other head full: the retrieval answers' mean loss (nats) minus that at full windows, and the accuracy
// lost. (N, K) row-major, N = layers x heads; column K-1 (the full window) is 0.
struct RetrievalCutTable {
  std::vector<int> windows;                          // the candidate windows
  std::vector<double> loss_increase, accuracy_drop;  // (N, K)
  double loss_full = 0, accuracy_full = 0;
  int64_t questions = 0;
};
RetrievalCutTable retrieval_cut_table(const Config& cfg, const std::string& weights_dir, const TokenShard& val);
// {"windows", "questions", "loss_full", "accuracy_full", "heads": [{"loss_increase" (K), "accuracy_drop" (K),
//  "window": chosen[n]}, ...]}: what a run of policy oracle writes to oracle.json.
nlohmann::json retrieval_cut_table_json(const RetrievalCutTable& t, const std::vector<int>& chosen);

}  // namespace aah
