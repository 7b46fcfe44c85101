#include "bench/bench_tokenizer.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/rng.h"
#include "text/bpe_train.h"
#include "data/corpus.h"
#include "core/files.h"
#include "text/tokenizer.h"

namespace aah {

namespace {

constexpr size_t kBenchBytes = 10'000'000;

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

// One text: a training case (BPE from scratch) and an encoding case (a fresh encoder, made untimed, over the whole
// text with the tokenizer trained in the same round).
struct TokText {
  std::string name;
  std::vector<std::string> texts;
  std::vector<std::string_view> views;
  size_t bytes = 0;
  BpeTrainStats st;
  std::vector<double> count_s, merge_s;  // per training run, warm-up rounds included
  nlohmann::ordered_json trained;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<TokenizerEncoder> enc;
  std::vector<int32_t> ids;
};

}  // namespace

int bench_tokenizer(const BenchOptions& o) {
  if (!o.json)
    std::printf(
        "byte-level BPE, vocab 8192: training (word counting on %d threads, merges on 1) and encoding "
        "(1 thread)\n",
        omp_get_max_threads());
  std::vector<std::unique_ptr<TokText>> texts;
  auto add = [&](const std::string& name, std::vector<std::string> t) {
    if (t.empty()) return;
    auto x = std::make_unique<TokText>();
    x->name = name;
    x->texts = std::move(t);
    for (auto& s : x->texts) x->views.push_back(s), x->bytes += s.size();
    texts.push_back(std::move(x));
  };
  add("python-stdlib", stdlib_text(kBenchBytes));
  add("generated-english", generated_text(kBenchBytes));
  add("brown", brown_text());
  BpeTrainOptions opt;
  opt.vocab_size = 8192;
  std::vector<MeasureCase> cases;
  for (auto& up : texts) {
    TokText* x = up.get();
    cases.push_back({x->name + " train", [x, opt] {
                       x->st = BpeTrainStats{};
                       x->trained = bpe_train(x->views, opt, &x->st);
                       x->count_s.push_back(x->st.count_seconds);
                       x->merge_s.push_back(x->st.merge_seconds);
                     }});
    cases.push_back({x->name + " encode",
                     [x] {
                       for (auto& t : x->texts) x->enc->encode(t, x->ids);
                     },
                     [x] {
                       x->enc.reset();
                       x->tok = std::make_unique<Tokenizer>(
                           Tokenizer::from_json(nlohmann::json::parse(x->trained.dump()), "(bench)"));
                       x->enc = std::make_unique<TokenizerEncoder>(*x->tok);
                       x->ids.clear();
                       x->ids.reserve(x->bytes / 3);
                     }});
  }
  const MeasureResult res = measure_interleaved(cases, o.measure);
  const double lim = res.spread_limit;
  bool any_flag = false;
  for (size_t i = 0; i < texts.size(); i++) {
    TokText& x = *texts[i];
    for (auto* v : {&x.count_s, &x.merge_s}) v->erase(v->begin(), v->begin() + res.warmup_rounds);
    const SampleStats& train_s = res.cases[2 * i];
    const SampleStats& enc_s = res.cases[2 * i + 1];
    const SampleStats mbps = rate_stats(enc_s, double(x.bytes) / 1e6, lim);
    const SampleStats tok_s = rate_stats(enc_s, double(x.ids.size()), lim);
    const SampleStats count_s = sample_stats(x.count_s, lim), merge_s = sample_stats(x.merge_s, lim);
    const double mb = double(x.bytes) / 1e6;
    any_flag = any_flag || train_s.flagged || enc_s.flagged;
    if (o.json) {
      nlohmann::json a = {{"bench", "tokenizer"},
                          {"what", "train"},
                          {"text", x.name},
                          {"mb", mb},
                          {"vocab", x.st.vocab_size},
                          {"merges", x.st.merges},
                          {"seconds", train_s.median},
                          {"count_seconds", count_s.median},
                          {"merge_seconds", merge_s.median},
                          {"unique_words", x.st.unique_words},
                          {"rounds", res.rounds}};
      a["stats"] = {{"seconds", stats_json(train_s, o.samples)},
                    {"count_seconds", stats_json(count_s, o.samples)},
                    {"merge_seconds", stats_json(merge_s, o.samples)}};
      a["flagged"] = train_s.flagged;
      nlohmann::json b = {{"bench", "tokenizer"},
                          {"what", "encode"},
                          {"text", x.name},
                          {"mb", mb},
                          {"vocab", x.st.vocab_size},
                          {"seconds", enc_s.median},
                          {"mb_per_s", mbps.median},
                          {"tokens_per_s", tok_s.median},
                          {"bytes_per_token", double(x.bytes) / double(x.ids.size())},
                          {"threads", 1},
                          {"rounds", res.rounds}};
      b["stats"] = {{"seconds", stats_json(enc_s, o.samples)},
                    {"mb_per_s", stats_json(mbps, o.samples)},
                    {"tokens_per_s", stats_json(tok_s, o.samples)}};
      b["flagged"] = enc_s.flagged;
      std::printf("%s\n%s\n", a.dump().c_str(), b.dump().c_str());
    } else {
      std::printf(
          "%-16s %6.1f MB  train %s s (count %.2f + merges %.2f; %lld distinct words)\n"
          "%-16s %6s     encode %s MB/s, %5.2f M tokens/s, %.2f bytes/token\n",
          x.name.c_str(), mb, stats_text(train_s, 2).c_str(), count_s.median, merge_s.median,
          (long long)x.st.unique_words, "", "", stats_text(mbps, 1).c_str(), tok_s.median / 1e6,
          double(x.bytes) / double(x.ids.size()));
    }
  }
  if (!o.json) {
    std::printf("%d rounds after %d warm-up round%s, %.1f s; figures: median (min, spread = IQR / median)\n",
                res.rounds, res.warmup_rounds, res.warmup_rounds == 1 ? "" : "s", res.seconds);
    if (any_flag) print_flag_note(lim);
  }
  return 0;
}

}  // namespace aah
