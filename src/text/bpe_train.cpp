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

nlohmann::ordered_json bpe_train_words(const std::vector<std::pair<std::string, int64_t>>& wc,
                                       const BpeTrainOptions& opt, BpeTrainStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const int n_special = int(opt.special_tokens.size());
  if (opt.vocab_size < 256 + n_special)
    fail("[bpe] vocab size ", opt.vocab_size, " is below the 256 byte tokens plus ", n_special, " special tokens");
  if (opt.vocab_size > (1 << 24)) fail("[bpe] vocab size ", opt.vocab_size, " is too large (at most 16777216)");

  std::vector<std::string> id_bytes = bpe_byte_alphabet();
  StringMap<int32_t> bytes_id;
  int32_t byte_to_id[256];
  for (size_t id = 0; id < id_bytes.size(); id++) {
    bytes_id.emplace(id_bytes[id], int32_t(id));
    byte_to_id[static_cast<unsigned char>(id_bytes[id][0])] = int32_t(id);
  }

  // Words as runs of symbols in one array; a merge shrinks a word in place.
  const size_t nw = wc.size();
  std::vector<int32_t> sym;
  std::vector<size_t> off(nw);
  std::vector<int32_t> len(nw);
  std::vector<int64_t> cnt(nw);
  for (size_t w = 0; w < nw; w++) {
    off[w] = sym.size();
    len[w] = int32_t(wc[w].first.size());
    cnt[w] = wc[w].second;
    for (unsigned char c : wc[w].first) sym.push_back(byte_to_id[c]);
  }

  // Pair statistics: count and the words that (may) hold the pair.
  struct PairStat {
    int64_t count = 0;
    std::vector<int32_t> where;
  };
  std::vector<PairStat> ps;
  std::vector<std::pair<int32_t, int32_t>> ps_pair;  // (a, b) of ps[i]
  PairMap index;
  index.reserve(1 << 16);
  auto pair_index = [&](int32_t a, int32_t b) -> size_t {
    const uint64_t k = PairMap::key(uint32_t(a), uint32_t(b));
    if (const uint64_t* v = index.find(k)) return size_t(*v);
    index.insert(k, ps.size());
    ps.emplace_back();
    ps_pair.push_back({a, b});
    return ps.size() - 1;
  };
  for (size_t w = 0; w < nw; w++) {
    const int32_t* s = &sym[off[w]];
    for (int32_t i = 0; i + 1 < len[w]; i++) {
      PairStat& p = ps[pair_index(s[i], s[i + 1])];
      p.count += cnt[w];
      if (p.where.empty() || p.where.back() != int32_t(w)) p.where.push_back(int32_t(w));
    }
  }

  struct Entry {
    int64_t count;
    int32_t a, b;
  };
  // Top of the heap: the highest count, then the smallest (a, b).
  auto lower = [](const Entry& x, const Entry& y) {
    if (x.count != y.count) return x.count < y.count;
    if (x.a != y.a) return x.a > y.a;
    return x.b > y.b;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(lower)> heap(lower);
  for (size_t i = 0; i < ps.size(); i++)
    if (ps[i].count > 0) heap.push({ps[i].count, ps_pair[i].first, ps_pair[i].second});

  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<uint32_t> seen(nw, 0);
  std::vector<size_t> touched;  // ps indices whose count rose in this merge
  std::vector<uint32_t> touched_mark;
  uint32_t iter = 0;
  const int64_t min_freq = std::max<int64_t>(opt.min_frequency, 1);
  int64_t vocab_now = 256 + n_special;
  while (vocab_now < opt.vocab_size && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    const size_t pi = pair_index(top.a, top.b);
    if (ps[pi].count != top.count) {  // stale entry
      if (ps[pi].count > 0) heap.push({ps[pi].count, top.a, top.b});
      continue;
    }
    if (top.count < min_freq) break;
    iter++;
    const std::string merged = id_bytes[size_t(top.a)] + id_bytes[size_t(top.b)];
    int32_t nid;
    if (auto it = bytes_id.find(merged); it != bytes_id.end()) {
      nid = it->second;
    } else {
      nid = int32_t(id_bytes.size());
      id_bytes.push_back(merged);
      bytes_id.emplace(merged, nid);
      vocab_now++;
    }
    merges.push_back({top.a, top.b});

    std::vector<int32_t> where = std::move(ps[pi].where);
    ps[pi].where.clear();
    touched.clear();
    auto add = [&](int32_t x, int32_t y, int64_t delta, int32_t w) {
      const size_t i = pair_index(x, y);
      PairStat& p = ps[i];
      p.count += delta;
      if (delta > 0) {
        if (p.where.empty() || p.where.back() != w) p.where.push_back(w);
        if (touched_mark.size() <= i) touched_mark.resize(ps.size() + 1024, 0);
        if (touched_mark[i] != iter) {
          touched_mark[i] = iter;
          touched.push_back(i);
        }
      }
    };
    for (int32_t w : where) {
      if (seen[size_t(w)] == iter) continue;
      seen[size_t(w)] = iter;
      int32_t* s = &sym[off[size_t(w)]];
      const int32_t n = len[size_t(w)];
      const int64_t c = cnt[size_t(w)];
      int32_t out = 0, i = 0;
      while (i < n) {
        if (i + 1 < n && s[i] == top.a && s[i + 1] == top.b) {
          if (out > 0) {
            add(s[out - 1], top.a, -c, w);
            add(s[out - 1], nid, c, w);
          }
          if (i + 2 < n) {
            add(top.b, s[i + 2], -c, w);
            add(nid, s[i + 2], c, w);
          }
          s[out++] = nid;
          i += 2;
        } else {
          s[out++] = s[i++];
        }
      }
      len[size_t(w)] = out;
    }
    ps[pi].count = 0;  // every occurrence is merged
    for (size_t i : touched)
      if (ps[i].count > 0) heap.push({ps[i].count, ps_pair[i].first, ps_pair[i].second});
    if (opt.verbose && merges.size() % 1000 == 0)
      std::fprintf(stderr, "[bpe] %zu merges, vocab %lld, last count %lld\n", merges.size(), (long long)vocab_now,
                   (long long)top.count);
  }
  if (stats) {
    stats->merges = int64_t(merges.size());
    stats->vocab_size = vocab_now;
    stats->merge_seconds = seconds_since(t0);
  }
  return bpe_tokenizer_json(id_bytes, merges, opt);
}

nlohmann::ordered_json bpe_train(const std::vector<std::string_view>& texts, const BpeTrainOptions& opt,
                                 BpeTrainStats* stats) {
  BpeTrainStats local;
  BpeTrainStats* s = stats ? stats : &local;
  const auto words = bpe_count_words(texts, opt, s);
  return bpe_train_words(words, opt, s);
}

}  // namespace aah
