#include "data/synth.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/rng.h"
#include "formats/checksum.h"
#include "data/corpus.h"
#include "core/files.h"
#include "data/shard.h"

namespace aah {

SynthCorpus synth_generate(const SynthOptions& o) {
  const int first_word = 3 + o.keys;
  if (o.keys < 1) fail("[synth] keys ", o.keys, " must be at least 1");
  if (o.unique_keys && o.keys < 2)
    fail("[synth] --unique-keys needs at least 2 keys (consecutive documents define keys from alternate halves); got ",
         o.keys);
  if (o.vocab_size < first_word + 16) fail("[synth] vocab_size ", o.vocab_size, " too small for ", o.keys, " keys");
  if (o.min_distance < 1 || o.max_distance < o.min_distance || o.doc_tokens <= o.max_distance + 8)
    fail("[synth] need 1 <= min_distance <= max_distance < doc_tokens - 8");
  if (!(o.def_rate > 0 && o.def_rate < 0.5)) fail("[synth] def_rate ", o.def_rate, " must lie in (0, 0.5)");
  if (o.values < 0 || o.values > o.vocab_size - first_word)
    fail("[synth] values ", o.values, " must lie in [0, ", o.vocab_size - first_word, "] (the words)");
  Rng rng(o.seed);
  const int words = o.vocab_size - first_word;
  // The grammar: each word has 4 likely successors (80% of the mass) and otherwise jumps uniformly.
  std::vector<int> succ(size_t(words) * 4);
  for (auto& s : succ) s = int(rng.below(words));

  SynthCorpus c;
  int64_t total = 0;
  while (total < o.tokens) {
    const bool is_val = rng.uniform() < 0.05;
    std::vector<int32_t>& out = is_val ? c.val : c.train;
    const int len = int(o.doc_tokens / 2 + rng.below(o.doc_tokens));
    std::vector<int32_t> doc;
    doc.reserve(len);
    doc.push_back(0);
    // pending questions: (position to ask at, key, value)
    struct Pending {
      int at, key, value;
    };
    std::vector<Pending> pending;
    std::vector<int> unused_keys;  // unique_keys: the keys this document may still define
    // Consecutive documents draw from alternate halves of the keys: a window that spans a document boundary
    // holds no older DEF of a key the current document asks for.
    const int64_t nth_in_split = is_val ? c.val_documents : c.documents - c.val_documents;
    const int half = o.keys / 2, first_key = int(nth_in_split % 2) * half;
    for (int k = first_key; k < first_key + half && o.unique_keys; k++) unused_keys.push_back(k);
    int word = int(rng.below(words));
    while (int(doc.size()) < len) {
      const int pos = int(doc.size());
      bool asked = false;
      for (size_t i = 0; i < pending.size(); i++)
        if (pending[i].at <= pos) {
          doc.insert(doc.end(), {2, 3 + pending[i].key, pending[i].value});
          pending.erase(pending.begin() + i);
          c.recalls++;
          asked = true;
          break;
        }
      if (asked) continue;
      if (rng.uniform() < o.def_rate && pos + o.min_distance + 3 < len && (!o.unique_keys || !unused_keys.empty())) {
        int key;
        if (o.unique_keys) {
          const size_t i = rng.below(unused_keys.size());
          key = unused_keys[i];
          unused_keys.erase(unused_keys.begin() + long(i));
        } else {
          key = int(rng.below(o.keys));
        }
        const int value = first_word + int(rng.below(o.values > 0 ? o.values : words));
        int dist;
        if (o.log_distance) {  // exp of a uniform draw in [log min, log (max + 1)), floored
          const double span = std::log((o.max_distance + 1.0) / o.min_distance);
          dist = std::min(o.max_distance, int(std::exp(std::log(double(o.min_distance)) + rng.uniform() * span)));
        } else {
          dist = o.min_distance + int(rng.below(o.max_distance - o.min_distance + 1));
        }
        doc.insert(doc.end(), {1, 3 + key, value});
        pending.push_back({pos + 3 + dist, key, value});
        continue;
      }
      word = rng.uniform() < 0.8 ? succ[size_t(word) * 4 + rng.below(4)] : int(rng.below(words));
      doc.push_back(first_word + word);
    }
    out.insert(out.end(), doc.begin(), doc.end());
    total += int64_t(doc.size());
    c.documents++;
    c.val_documents += is_val;
  }
  return c;
}

nlohmann::ordered_json synth_tokenizer_json(const SynthOptions& o) {
  using ojson = nlohmann::ordered_json;
  const char* markers[3] = {"<doc>", "<def>", "<ask>"};
  ojson added = ojson::array(), vocab = ojson::object();
  for (int i = 0; i < 3; i++) {
    added.push_back({{"id", i},
                     {"content", markers[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
    vocab[markers[i]] = i;
  }
  for (int k = 0; k < o.keys; k++) vocab[str_cat("k", k)] = 3 + k;
  for (int w = 3 + o.keys; w < o.vocab_size; w++) vocab[str_cat("w", w - 3 - o.keys)] = w;
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = std::move(added);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  j["post_processor"] = nullptr;
  j["decoder"] = nullptr;
  j["model"] = {{"type", "WordLevel"}, {"vocab", std::move(vocab)}, {"unk_token", "<unk>"}};
  return j;
}

void synth_write(const std::string& dir, const SynthOptions& o, bool force) {
  corpus_check_out_dir(dir, force);
  SynthCorpus c = synth_generate(o);
  if (c.val.empty() || c.train.empty()) fail("[synth] --tokens ", o.tokens, " is too small to split train/val");
  make_dirs(dir);
  shard_write(dir + "/train.bin", c.train, uint32_t(o.vocab_size));
  shard_write(dir + "/val.bin", c.val, uint32_t(o.vocab_size));
  write_file_atomic(dir + "/tokenizer.json", synth_tokenizer_json(o).dump(2) + "\n");
  nlohmann::json files = nlohmann::json::object();
  for (const char* f : {"train.bin", "val.bin", "tokenizer.json"}) {
    const std::string bytes = read_file(dir + "/" + f);
    files[f] = {{"bytes", bytes.size()}, {"sha256", sha256_hex(bytes)}};
  }
  nlohmann::json meta = {{"source", "synth"},
                         {"vocab_size", o.vocab_size},
                         {"train_tokens", c.train.size()},
                         {"val_tokens", c.val.size()},
                         {"documents", c.documents},
                         {"val_documents", c.val_documents},
                         {"recalls", c.recalls},
                         {"keys", o.keys},
                         {"distance", {o.min_distance, o.max_distance}},
                         {"distance_spread", o.log_distance ? "log-uniform" : "uniform"},
                         {"def_rate", o.def_rate},
                         {"values", o.values > 0 ? o.values : o.vocab_size - 3 - o.keys},
                         {"unique_keys", o.unique_keys},
                         {"seed", o.seed},
                         {"split", "by document, about 5% validation"},
                         {"document_start", {{"token", "<doc>"}, {"id", 0}}},
                         {"tokenizer",
                          {{"file", "tokenizer.json"},
                           {"type", "WordLevel (Hugging Face tokenizer.json), WhitespaceSplit"},
                           {"tokens",
                            "<doc> = 0, <def> = 1, <ask> = 2, k0.. = keys from 3, w0.. = words and values "
                            "from 3 + keys"}}},
                         {"files", files}};
  write_file_atomic(dir + "/meta.json", meta.dump(2) + "\n");
}

bool synth_is_corpus(const std::string& dir) {
  const std::string path = dir + "/meta.json";
  if (!path_exists(path)) return false;
  const nlohmann::json meta = read_json_file(path);
  return meta.is_object() && meta.value("source", nlohmann::json()) == "synth";
}

}  // namespace aah
