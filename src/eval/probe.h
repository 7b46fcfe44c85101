// `aah probe heads`: which heads retrieve. On a synth corpus's validation windows, for the run's model at full
// windows, per (layer, head): the attention mass that the query predicting a question's value (the key in
// `ASK k`) puts on its DEF's three tokens (DEF k v), averaged over the questions; and how much retrieval accuracy
// drops when that head alone is cut to the smallest candidate window (every other head full).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

}  // namespace aah
