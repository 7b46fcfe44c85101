// The built-in `synth` corpus: token sequences that mix local structure (a random first-order grammar with a few
// likely successors per token) with long-range recall (a key/value pair defined early in a document and asked for
// again hundreds to thousands of tokens later). Deterministic for a seed. The ids are the text; tokenizer.json
// (a Hugging Face WordLevel model, WhitespaceSplit pre-tokenizer) names them so that `aah tokenize` can show them.
//
// Token ids: 0 = document start "<doc>", 1 = DEF marker "<def>", 2 = ASK marker "<ask>", [3, 3 + keys) keys
// "k0", "k1", ..., [3 + keys, V) words and values "w0", "w1", .... A definition is DEF k v; a question is
// ASK k v, where v can only be predicted by remembering the DEF.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace aah {

constexpr int32_t kSynthDoc = 0, kSynthDef = 1, kSynthAsk = 2;  // the marker ids

struct SynthOptions {
  int64_t tokens = 2'000'000;  // total, train + val
  int vocab_size = 512;
  int doc_tokens = 2048;  // mean document length
  int keys = 64;          // distinct keys
  int min_distance = 64;  // DEF-to-ASK distance range, in tokens
  int max_distance = 1536;
  bool log_distance = false;  // distances log-uniform in [min, max] (as many short as long); else uniform
  double def_rate = 0.01;    // chance that a grammar position starts a definition
  int values = 0;            // values drawn from the first `values` words; 0: from all words
  bool unique_keys = false;  // a key is defined at most once per document, and consecutive documents use
                             // alternate halves of the keys (no older DEF of an asked key in a window)
  uint64_t seed = 0;
};

struct SynthCorpus {
  std::vector<int32_t> train, val;  // split by document, about 5% val
  int64_t documents = 0, val_documents = 0, recalls = 0;
};

SynthCorpus synth_generate(const SynthOptions& opt);
// The WordLevel tokenizer.json of the ids above (markers also as special added tokens).
nlohmann::ordered_json synth_tokenizer_json(const SynthOptions& opt);
// Writes DIR/train.bin, DIR/val.bin, DIR/tokenizer.json and DIR/meta.json (sizes, split, distances, SHA-256 of
// each file). Refuses to overwrite those files unless `force`.
void synth_write(const std::string& dir, const SynthOptions& opt, bool force = false);
// True when DIR/meta.json says the corpus is synth ("source": "synth"); false without a meta.json. An unreadable
// or corrupt meta.json is an error naming it.
bool synth_is_corpus(const std::string& dir);

}  // namespace aah
