#include "bench/bench_tokenizer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/rng.h"
#include "io/bpe_train.h"
#include "io/corpus.h"
#include "io/files.h"
#include "io/tokenizer.h"

namespace aah {

namespace {

constexpr size_t kBenchBytes = 10'000'000;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// About `bytes` of English-like text: Zipfian pseudo-words, sentences, numbers, paragraphs. Deterministic.
std::vector<std::string> generated_text(size_t bytes) {
  Rng rng(7);
  const char* onsets[] = {"b", "c", "d", "f", "g",  "h",  "j",  "k",  "l",  "m",  "n",  "p",  "r",
                          "s", "t", "v", "w", "th", "st", "pr", "ch", "sh", "tr", "gr", "pl", ""};
  const char* vowels[] = {"a", "e", "i", "o", "u", "ea", "ou", "io", "ai"};
  const char* codas[] = {"", "", "n", "r", "s", "t", "l", "nd", "ng", "st", "rt", "ck"};
  std::vector<std::string> words(20000);
  for (auto& w : words) {
    const int syl = 1 + int(rng.below(3));
    for (int s = 0; s < syl; s++) {
      w += onsets[rng.below(26)];
      w += vowels[rng.below(9)];
      w += codas[rng.below(12)];
    }
  }
  // Zipf(1) sampling by inverse CDF over ranks.
  std::vector<double> cdf(words.size());
  double z = 0;
  for (size_t r = 0; r < words.size(); r++) cdf[r] = (z += 1.0 / double(r + 1));
  std::vector<std::string> docs;
  std::string doc;
  size_t total = 0;  // bytes in docs
  while (total + doc.size() < bytes) {
    const int len = 5 + int(rng.below(20));
    for (int i = 0; i < len; i++) {
      const double u = rng.uniform() * z;
      std::string w = words[size_t(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin())];
      if (i == 0) w[0] = char(w[0] - 32);
      if (rng.uniform() < 0.02) w = std::to_string(rng.below(100000));
      doc += w;
      if (i + 1 < len) doc += rng.uniform() < 0.08 ? ", " : " ";
    }
    doc += rng.uniform() < 0.1 ? "?" : ".";
    doc += rng.uniform() < 0.15 ? "\n\n" : " ";
    if (doc.size() > 20000) {
      total += doc.size();
      docs.push_back(std::move(doc));
      doc.clear();
    }
  }
  if (!doc.empty()) docs.push_back(doc);
  return docs;
}

// Up to `bytes` of .py files from the Python standard library, or nothing.
std::vector<std::string> stdlib_text(size_t bytes) {
  std::vector<std::string> out;
  try {
    size_t total = 0;
    for (auto& d : code_documents()) {
      if (total >= bytes) break;
      if (total + d.text.size() > bytes) d.text.resize(bytes - total);
      total += d.text.size();
      out.push_back(std::move(d.text));
    }
  } catch (const std::exception&) {
    out.clear();
  }
  // A cut in the middle of a multi-byte character would make the last text invalid: drop the partial character.
  if (!out.empty()) {
    std::string& last = out.back();
    while (!last.empty() && (static_cast<unsigned char>(last.back()) & 0x80)) last.pop_back();
  }
  return out;
}

std::vector<std::string> brown_text() {
  std::vector<std::string> out;
  const std::string dir = corpus_cache_dir() + "/npm/" + kBrownNpmSpec + "/package";
  if (!dir_exists(dir)) return out;
  try {
    for (auto& d : brown_documents(dir)) out.push_back(std::move(d.text));
  } catch (const std::exception&) {
    out.clear();
  }
  return out;
}

void run_one(const std::string& name, const std::vector<std::string>& texts, bool json) {
  std::vector<std::string_view> views(texts.begin(), texts.end());
  size_t bytes = 0;
  for (auto& t : texts) bytes += t.size();
  BpeTrainOptions o;
  o.vocab_size = 8192;
  BpeTrainStats st;
  const double t0 = now_s();
  const auto j = bpe_train(views, o, &st);
  const double train_s = now_s() - t0;
  const Tokenizer tok = Tokenizer::from_json(nlohmann::json::parse(j.dump()), "(bench)");
  TokenizerEncoder enc(tok);
  std::vector<int32_t> ids;
  ids.reserve(bytes / 3);
  const double t1 = now_s();
  for (auto& t : texts) enc.encode(t, ids);
  const double enc_s = now_s() - t1;
  const double mbps = double(bytes) / 1e6 / enc_s;
  if (json) {
    nlohmann::json a = {{"bench", "tokenizer"},
                        {"what", "train"},
                        {"text", name},
                        {"mb", double(bytes) / 1e6},
                        {"vocab", st.vocab_size},
                        {"merges", st.merges},
                        {"seconds", train_s},
                        {"count_seconds", st.count_seconds},
                        {"merge_seconds", st.merge_seconds},
                        {"unique_words", st.unique_words}};
    nlohmann::json b = {{"bench", "tokenizer"},
                        {"what", "encode"},
                        {"text", name},
                        {"mb", double(bytes) / 1e6},
                        {"vocab", st.vocab_size},
                        {"seconds", enc_s},
                        {"mb_per_s", mbps},
                        {"tokens_per_s", double(ids.size()) / enc_s},
                        {"bytes_per_token", double(bytes) / double(ids.size())},
                        {"threads", 1}};
    std::printf("%s\n%s\n", a.dump().c_str(), b.dump().c_str());
  } else {
    std::printf(
        "%-16s %6.1f MB  train %6.2f s (count %.2f + merges %.2f; %lld distinct words)  "
        "encode %6.1f MB/s, %5.2f M tokens/s, %.2f bytes/token\n",
        name.c_str(), double(bytes) / 1e6, train_s, st.count_seconds, st.merge_seconds, (long long)st.unique_words,
        mbps, double(ids.size()) / enc_s / 1e6, double(bytes) / double(ids.size()));
  }
  std::fflush(stdout);
}

}  // namespace

int bench_tokenizer(bool json) {
  if (!json)
    std::printf(
        "byte-level BPE, vocab 8192: training (word counting on %d threads, merges on 1) and encoding "
        "(1 thread)\n",
        omp_get_max_threads());
  std::vector<std::string> code = stdlib_text(kBenchBytes);
  if (!code.empty()) run_one("python-stdlib", code, json);
  run_one("generated-english", generated_text(kBenchBytes), json);
  std::vector<std::string> brown = brown_text();
  if (!brown.empty()) run_one("brown", brown, json);
  return 0;
}

}  // namespace aah
