// Suite presets: a data set, a model and training budget (as --set assignments), the regimes to compare and the
// seeds. `aah suite --preset NAME` runs one training run per (regime, seed), evaluates each, writes the report.
#pragma once
#include <string>
#include <vector>

#include "data/synth.h"

namespace aah {

struct SuitePreset {
  std::string name;
  std::string summary;  // one line for --help and the report
  std::string data;     // "synth", "brown" or "code" (as `aah data`)
  int data_vocab = 0;   // vocabulary of the data's tokenizer
  SynthOptions synth;              // synth only: the generator's settings (vocab_size = data_vocab)
  std::vector<std::string> sets;   // config assignments, applied in order (model, train.*, aah.* knobs)
  std::vector<std::string> regimes;  // aah.regime values; "full" is the reference of the paired differences
  std::vector<int> seeds;
  // A pretrained start (the DuoAttention setting): per seed, a full-attention base run (`sets`, then `base_sets`,
  // then the user's --set) trains first in OUT/base/full-s<seed>, and every run of that seed starts from its
  // weights (train.init_from).
  bool base = false;
  std::vector<std::string> base_sets;
  // Synth data: a base whose retrieval accuracy at the farthest distance is below kRetrievalKept after its steps
  // trains on, base_extend_steps at a time, up to base_max_steps (0: no extension). One that still does not then
  // starts again from a new initialization (train.seed = seed + 1000 x attempt), at most base_restarts times; the
  // failed attempt is kept in OUT/base/full-s<seed>-failed<attempt>.
  int base_extend_steps = 0, base_max_steps = 0, base_restarts = 0;
  double timing_budget_s = 60;  // seconds of side-by-side timing of the final window maps (aah bench maps)
};

const std::vector<std::string>& suite_preset_names();
// The preset called `name`; fails listing the known names.
SuitePreset suite_preset(const std::string& name);

}  // namespace aah
