// The built-in `synth` corpus: token sequences that mix local structure (a random first-order grammar with a few
// likely successors per token) with long-range recall (a key/value pair defined early in a document and asked for
// again hundreds to thousands of tokens later). Deterministic for a seed. No tokenizer: ids are the text.
//
// Token ids: 0 = document start, 1 = DEF marker, 2 = ASK marker, [3, 3 + keys) keys, [3 + keys, V) words and
// values. A definition is DEF k v; a question is ASK k v, where v can only be predicted by remembering the DEF.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace aah {

struct SynthOptions {
  int64_t tokens = 2'000'000;  // total, train + val
  int vocab_size = 512;
  int doc_tokens = 2048;       // mean document length
  int keys = 64;               // distinct keys
  int min_distance = 64;       // DEF-to-ASK distance range, in tokens
  int max_distance = 1536;
  uint64_t seed = 0;
};

struct SynthCorpus {
  std::vector<int32_t> train, val;  // split by document, about 5% val
  int64_t documents = 0, val_documents = 0, recalls = 0;
};

SynthCorpus synth_generate(const SynthOptions& opt);
// Writes DIR/train.bin, DIR/val.bin and DIR/meta.json.
void synth_write(const std::string& dir, const SynthOptions& opt);

}  // namespace aah
