#include "text/bpe_train.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <queue>

#include "core/check.h"
#include "text/tokenizer.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace aah {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::ordered_json byte_level_obj() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
}

}  // namespace

std::vector<std::string> bpe_byte_alphabet() {
  std::vector<int> order(256);
  for (int b = 0; b < 256; b++) order[size_t(b)] = b;
  std::sort(order.begin(), order.end(),
            [](int x, int y) { return byte_level_char(uint8_t(x)) < byte_level_char(uint8_t(y)); });
  std::vector<std::string> out;
  for (int b : order) out.push_back(std::string(1, char(b)));
  return out;
}

nlohmann::ordered_json bpe_tokenizer_json(const std::vector<std::string>& id_bytes,
                                          const std::vector<std::pair<int32_t, int32_t>>& merges,
                                          const BpeTrainOptions& opt) {
  using ojson = nlohmann::ordered_json;
  const std::string pattern = opt.pattern.empty() ? kQwenPretokenizeRegex : opt.pattern;
  ojson added = ojson::array();
  int32_t next_id = int32_t(id_bytes.size());
  for (const std::string& s : opt.special_tokens) {
    utf8_check(s, "[bpe] special token");
    if (s.empty()) fail("[bpe] empty special token");
    added.push_back({{"id", next_id++},
                     {"content", s},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  ojson vocab = ojson::object();
  std::vector<std::string> spelled(id_bytes.size());
  for (size_t id = 0; id < id_bytes.size(); id++) {
    spelled[id] = byte_level_encode(id_bytes[id]);
    vocab[spelled[id]] = id;
  }
  ojson m = ojson::array();
  for (auto [a, b] : merges) m.push_back(ojson::array({spelled[size_t(a)], spelled[size_t(b)]}));
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = std::move(added);
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       ojson::array(
           {ojson{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
            byte_level_obj()})}};
  j["post_processor"] = byte_level_obj();
  j["decoder"] = byte_level_obj();
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", std::move(vocab)},
                {"merges", std::move(m)}};
  return j;
}

std::vector<std::pair<std::string, int64_t>> bpe_count_words(const std::vector<std::string_view>& texts,
                                                             const BpeTrainOptions& opt, BpeTrainStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  // The pipeline of the tokenizer being trained (no merges yet) splits the texts exactly as it will encode them.
  const Tokenizer base = Tokenizer::from_json(
      nlohmann::json::parse(bpe_tokenizer_json(bpe_byte_alphabet(), {}, opt).dump()), "(bpe trainer)");
  StringMap<int64_t> total;
  int64_t bytes = 0, words = 0;
  std::string error;
#pragma omp parallel reduction(+ : bytes, words)
  {
    TokenizerEncoder enc(base);
    StringMap<int64_t> local;
#pragma omp for schedule(dynamic, 1) nowait
    for (size_t i = 0; i < texts.size(); i++) {
      try {
        enc.pretokenize(texts[i], [&](std::string_view w) {
          auto it = local.find(w);
          if (it == local.end())
            local.emplace(std::string(w), 1);
          else
            it->second++;
          words++;
        });
        bytes += int64_t(texts[i].size());
      } catch (const Error& e) {
#pragma omp critical(bpe_count_error)
        if (error.empty()) error = str_cat("text ", i, ": ", e.what());
      }
    }
#pragma omp critical(bpe_count_merge)
    for (auto& [w, c] : local) total[w] += c;
  }
  if (!error.empty()) fail("[bpe] ", error);
  std::vector<std::pair<std::string, int64_t>> out(total.begin(), total.end());
  std::sort(out.begin(), out.end());  // deterministic order, whatever the threads did
  if (stats) {
    stats->bytes = bytes;
    stats->words = words;
    stats->unique_words = int64_t(out.size());
    stats->count_seconds = seconds_since(t0);
  }
  return out;
}

namespace {

void check_vocab_size(const BpeTrainOptions& opt) {
  const int n_special = int(opt.special_tokens.size());
  if (opt.vocab_size < 256 + n_special)
    fail("[bpe] vocab size ", opt.vocab_size, " is below the 256 byte tokens plus ", n_special, " special tokens");
  if (opt.vocab_size > (1 << 24)) fail("[bpe] vocab size ", opt.vocab_size, " is too large (at most 16777216)");
}

// The tokens so far: bytes per id and id per bytes (a merge whose bytes already have a token reuses it).
struct TokenTable {
  std::vector<std::string> id_bytes = bpe_byte_alphabet();
  StringMap<int32_t> bytes_id;

  TokenTable() {
    for (size_t id = 0; id < id_bytes.size(); id++) bytes_id.emplace(id_bytes[id], int32_t(id));
  }
  // The id of the token for `bytes`, added when new.
  int32_t id_of(const std::string& bytes) {
    if (auto it = bytes_id.find(bytes); it != bytes_id.end()) return it->second;
    const int32_t id = int32_t(id_bytes.size());
    id_bytes.push_back(bytes);
    bytes_id.emplace(bytes, id);
    return id;
  }
};

// A candidate merge on the heap. An entry whose count is no longer the pair's is stale: pop_best() puts the pair
// back with its current count.
struct HeapEntry {
  int64_t count;
  int32_t a, b;
};
// Top of the heap: the highest count, then the smallest (a, b).
struct HeapLower {
  bool operator()(const HeapEntry& x, const HeapEntry& y) const {
    if (x.count != y.count) return x.count < y.count;
    if (x.a != y.a) return x.a > y.a;
    return x.b > y.b;
  }
};

// The words as runs of symbols in one array, the pair statistics over them and the heap of candidate pairs.
// merge() applies one merge to every word that holds the pair and updates the counts incrementally.
class PairMerger {
 public:
  PairMerger(const std::vector<std::pair<std::string, int64_t>>& wc, const TokenTable& tokens) {
    int32_t byte_to_id[256];
    for (size_t id = 0; id < 256; id++) byte_to_id[static_cast<unsigned char>(tokens.id_bytes[id][0])] = int32_t(id);
    const size_t nw = wc.size();
    off_.resize(nw);
    len_.resize(nw);
    cnt_.resize(nw);
    seen_.assign(nw, 0);
    for (size_t w = 0; w < nw; w++) {
      off_[w] = sym_.size();
      len_[w] = int32_t(wc[w].first.size());
      cnt_[w] = wc[w].second;
      for (unsigned char c : wc[w].first) sym_.push_back(byte_to_id[c]);
    }
    count_pairs();
  }

  // The most frequent pair that is not stale; false when no pair is left.
  bool pop_best(HeapEntry& top) {
    while (!heap_.empty()) {
      top = heap_.top();
      heap_.pop();
      const PairStat& p = ps_[pair_index(top.a, top.b)];
      if (p.count == top.count) return true;
      if (p.count > 0) heap_.push({p.count, top.a, top.b});
    }
    return false;
  }

  // Replaces every occurrence of the pair (a, b) by `merged`.
  void merge(int32_t a, int32_t b, int32_t merged) {
    iter_++;
    const size_t pi = pair_index(a, b);
    std::vector<int32_t> where = std::move(ps_[pi].where);
    ps_[pi].where.clear();
    touched_.clear();
    for (int32_t w : where) {
      if (seen_[size_t(w)] == iter_) continue;
      seen_[size_t(w)] = iter_;
      merge_in_word(w, a, b, merged);
    }
    ps_[pi].count = 0;  // every occurrence is merged
    for (size_t i : touched_)
      if (ps_[i].count > 0) push(i);
  }

 private:
  // Pair statistics: count and the words that (may) hold the pair.
  struct PairStat {
    int64_t count = 0;
    std::vector<int32_t> where;
  };

  size_t pair_index(int32_t a, int32_t b) {
    const uint64_t k = PairMap::key(uint32_t(a), uint32_t(b));
    if (const uint64_t* v = index_.find(k)) return size_t(*v);
    index_.insert(k, ps_.size());
    ps_.emplace_back();
    ps_pair_.push_back({a, b});
    return ps_.size() - 1;
  }

  void count_pairs() {
    index_.reserve(1 << 16);
    for (size_t w = 0; w < off_.size(); w++) {
      const int32_t* s = &sym_[off_[w]];
      for (int32_t i = 0; i + 1 < len_[w]; i++) {
        PairStat& p = ps_[pair_index(s[i], s[i + 1])];
        p.count += cnt_[w];
        if (p.where.empty() || p.where.back() != int32_t(w)) p.where.push_back(int32_t(w));
      }
    }
    for (size_t i = 0; i < ps_.size(); i++)
      if (ps_[i].count > 0) push(i);
  }

  void push(size_t i) { heap_.push({ps_[i].count, ps_pair_[i].first, ps_pair_[i].second}); }

  // Adds `delta` to the count of pair (x, y) as seen in word w; a pair whose count rose goes back on the heap after
  // the merge.
  void add(int32_t x, int32_t y, int64_t delta, int32_t w) {
    const size_t i = pair_index(x, y);
    PairStat& p = ps_[i];
    p.count += delta;
    if (delta > 0) {
      if (p.where.empty() || p.where.back() != w) p.where.push_back(w);
      if (touched_mark_.size() <= i) touched_mark_.resize(ps_.size() + 1024, 0);
      if (touched_mark_[i] != iter_) {
        touched_mark_[i] = iter_;
        touched_.push_back(i);
      }
    }
  }

  // Merges (a, b) in word w in place, moving the counts of its neighbour pairs to the merged token.
  void merge_in_word(int32_t w, int32_t a, int32_t b, int32_t merged) {
    int32_t* s = &sym_[off_[size_t(w)]];
    const int32_t n = len_[size_t(w)];
    const int64_t c = cnt_[size_t(w)];
    int32_t out = 0, i = 0;
    while (i < n) {
      if (i + 1 < n && s[i] == a && s[i + 1] == b) {
        if (out > 0) {
          add(s[out - 1], a, -c, w);
          add(s[out - 1], merged, c, w);
        }
        if (i + 2 < n) {
          add(b, s[i + 2], -c, w);
          add(merged, s[i + 2], c, w);
        }
        s[out++] = merged;
        i += 2;
      } else {
        s[out++] = s[i++];
      }
    }
    len_[size_t(w)] = out;
  }

  // Words: symbols of word w are sym_[off_[w] .. off_[w] + len_[w]), the word occurs cnt_[w] times.
  std::vector<int32_t> sym_;
  std::vector<size_t> off_;
  std::vector<int32_t> len_;
  std::vector<int64_t> cnt_;
  std::vector<PairStat> ps_;
  std::vector<std::pair<int32_t, int32_t>> ps_pair_;  // (a, b) of ps_[i]
  PairMap index_;
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, HeapLower> heap_;
  uint32_t iter_ = 0;            // merges so far: marks the words and pairs seen in the current one
  std::vector<uint32_t> seen_;   // per word
  std::vector<size_t> touched_;  // ps_ indices whose count rose in this merge
  std::vector<uint32_t> touched_mark_;
};

}  // namespace

nlohmann::ordered_json bpe_train_words(const std::vector<std::pair<std::string, int64_t>>& wc,
                                       const BpeTrainOptions& opt, BpeTrainStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  check_vocab_size(opt);
  TokenTable tokens;
  PairMerger merger(wc, tokens);
  std::vector<std::pair<int32_t, int32_t>> merges;
  const int64_t min_freq = std::max<int64_t>(opt.min_frequency, 1);
  const int64_t n_special = int64_t(opt.special_tokens.size());
  int64_t vocab_now = int64_t(tokens.id_bytes.size()) + n_special;  // bytes, merged tokens, special tokens
  HeapEntry top;
  while (vocab_now < opt.vocab_size && merger.pop_best(top)) {
    if (top.count < min_freq) break;
    const int32_t nid = tokens.id_of(tokens.id_bytes[size_t(top.a)] + tokens.id_bytes[size_t(top.b)]);
    vocab_now = int64_t(tokens.id_bytes.size()) + n_special;
    merges.push_back({top.a, top.b});
    merger.merge(top.a, top.b, nid);
    if (opt.verbose && merges.size() % 1000 == 0)
      std::fprintf(stderr, "[bpe] %zu merges, vocab %lld, last count %lld\n", merges.size(), (long long)vocab_now,
                   (long long)top.count);
  }
  if (stats) {
    stats->merges = int64_t(merges.size());
    stats->vocab_size = vocab_now;
    stats->merge_seconds = seconds_since(t0);
  }
  return bpe_tokenizer_json(tokens.id_bytes, merges, opt);
}

nlohmann::ordered_json bpe_train(const std::vector<std::string_view>& texts, const BpeTrainOptions& opt,
                                 BpeTrainStats* stats) {
  BpeTrainStats local;
  BpeTrainStats* s = stats ? stats : &local;
  const auto words = bpe_count_words(texts, opt, s);
  return bpe_train_words(words, opt, s);
}

}  // namespace aah
