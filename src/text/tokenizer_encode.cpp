// Encoding (TokenizerEncoder): added tokens, normalizer, pre-tokenizer steps, then the model per word (BPE through
// a word cache, or WordLevel lookup).
#include "text/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include "core/check.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace aah {

namespace {

constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kCacheMaxEntries = size_t(1) << 18;

// Unicode White_Space (what \s means in Oniguruma and char::is_whitespace in Rust).
bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

struct TokenizerEncoder::State {
  std::vector<pcre2_match_data*> md;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  // Per pre-tokenizer step: its pieces (start, end, is_match) and the buffer for a prefixed piece.
  struct Span {
    size_t start, end;
    bool match;
  };
  std::vector<std::vector<Span>> spans;
  std::vector<std::string> prefixed;
  std::string norm[2];
  // Word cache: bytes -> (offset << 32 | count) into cache_ids.
  StringMap<uint64_t> cache;
  std::vector<int32_t> cache_ids;
  std::vector<int32_t>* out = nullptr;
  ~State() {
    for (auto* m : md) pcre2_match_data_free(m);
    if (mctx) pcre2_match_context_free(mctx);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
};

TokenizerEncoder::TokenizerEncoder(const Tokenizer& tok) : impl_(tok.impl_.get()), st_(std::make_unique<State>()) {
  const TokenizerImpl& t = *impl_;
  for (const auto& re : t.regexes)
    st_->md.push_back(pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(re->code), nullptr));
  st_->mctx = pcre2_match_context_create(nullptr);
  st_->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  if (st_->mctx && st_->jit_stack) pcre2_jit_stack_assign(st_->mctx, nullptr, st_->jit_stack);
  st_->spans.resize(t.steps.size());
  st_->prefixed.resize(t.steps.size());
}

TokenizerEncoder::~TokenizerEncoder() = default;

namespace {

using Sink = void (*)(void*, std::string_view);

struct Pipeline {
  const TokenizerImpl& t;
  TokenizerEncoder::State& st;
  Sink sink;
  void* ctx;

  // Finds the next non-empty match of regex `ri` in s at or after `from`; false when there is none.
  bool next_match(int ri, std::string_view s, size_t from, size_t& ms, size_t& me) {
    const Regex& re = *t.regexes[size_t(ri)];
    auto* code = static_cast<pcre2_code*>(re.code);
    pcre2_match_data* md = st.md[size_t(ri)];
    while (from <= s.size()) {
      const auto* subj = reinterpret_cast<PCRE2_SPTR>(s.data());
      const int rc = re.jit ? pcre2_jit_match(code, subj, s.size(), from, 0, md, st.mctx)
                            : pcre2_match(code, subj, s.size(), from, PCRE2_NO_UTF_CHECK, md, st.mctx);
      if (rc == PCRE2_ERROR_NOMATCH) return false;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fail("[tokenizer] ", t.name, ": regex '", re.pattern,
             "' failed on the input: ", reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      ms = ov[0];
      me = ov[1];
      if (me > ms) return true;
      // Empty match: skip one character and look again.
      if (ms >= s.size()) return false;
      from = ms + 1;
      while (from < s.size() && (static_cast<unsigned char>(s[from]) & 0xC0) == 0x80) from++;
    }
    return false;
  }

  void run(size_t depth, std::string_view piece) {
    if (piece.empty()) return;
    if (depth == t.steps.size()) {
      sink(ctx, piece);
      return;
    }
    const PreTokenizerStep& s = t.steps[depth];
    if (s.add_prefix_space && piece[0] != ' ') {
      std::string& buf = st.prefixed[depth];
      buf.assign(1, ' ');
      buf.append(piece);
      piece = buf;
    }
    if (s.regex < 0) {
      run(depth + 1, piece);
      return;
    }
    if (s.behavior == SplitBehavior::Isolated && !s.invert) {  // the common case, streamed
      size_t at = 0, ms, me;
      while (at < piece.size() && next_match(s.regex, piece, at, ms, me)) {
        if (ms > at) run(depth + 1, piece.substr(at, ms - at));
        run(depth + 1, piece.substr(ms, me - ms));
        at = me;
      }
      if (at < piece.size()) run(depth + 1, piece.substr(at));
      return;
    }
    // General case: matches and gaps, then the behavior (as in HF's NormalizedString::split).
    auto& sp = st.spans[depth];
    sp.clear();
    size_t at = 0, ms, me;
    while (at < piece.size() && next_match(s.regex, piece, at, ms, me)) {
      if (ms > at) sp.push_back({at, ms, s.invert});
      sp.push_back({ms, me, !s.invert});
      at = me;
    }
    if (at < piece.size()) sp.push_back({at, piece.size(), s.invert});
    std::vector<TokenizerEncoder::State::Span> res;
    res.reserve(sp.size());
    switch (s.behavior) {
      case SplitBehavior::Removed:
        for (auto& x : sp)
          if (!x.match) res.push_back(x);
        break;
      case SplitBehavior::Isolated:
        res = sp;
        break;
      case SplitBehavior::MergedWithPrevious: {
        bool prev_match = false;
        for (auto& x : sp) {
          if (x.match && !prev_match && !res.empty())
            res.back().end = x.end;
          else
            res.push_back(x);
          prev_match = x.match;
        }
        break;
      }
      case SplitBehavior::MergedWithNext: {
        bool prev_match = false;
        for (size_t k = sp.size(); k-- > 0;) {
          const auto& x = sp[k];
          if (x.match && !prev_match && !res.empty())
            res.back().start = x.start;
          else
            res.push_back(x);
          prev_match = x.match;
        }
        std::reverse(res.begin(), res.end());
        break;
      }
      case SplitBehavior::Contiguous: {
        bool prev_match = false;
        for (auto& x : sp) {
          if (x.match == prev_match && !res.empty())
            res.back().end = x.end;
          else
            res.push_back(x);
          prev_match = x.match;
        }
        break;
      }
    }
    for (auto& x : res) run(depth + 1, piece.substr(x.start, x.end - x.start));
  }

  void segment(std::string_view seg) {
    if (seg.empty()) return;
    int which = 0;
    for (NormalForm f : t.normalizers) {
      if (unicode_quick_stable(seg, f)) continue;
      st.norm[which] = unicode_normalize(seg, f);
      seg = st.norm[which];
      which ^= 1;
    }
    run(0, seg);
  }

  bool is_word_char(std::string_view s, size_t i) const {  // for single_word: letters, digits, '_'
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) return std::isalnum(c) || c == '_';
    size_t j = i;
    return !is_white_space(utf8_next(s, j));
  }

  // Step 1: added tokens, then the segments between them.
  void text(std::string_view s, std::vector<int32_t>* ids) {
    if (t.added.empty()) {
      segment(s);
      return;
    }
    size_t seg_start = 0, i = 0;
    while (i < s.size()) {
      if (!t.first_byte[static_cast<unsigned char>(s[i])]) {
        i++;
        continue;
      }
      // Longest added token starting at i.
      int32_t node = 0, best = -1;
      size_t best_len = 0;
      for (size_t k = i; k < s.size(); k++) {
        const auto& next = t.trie[size_t(node)].next;
        const unsigned char c = static_cast<unsigned char>(s[k]);
        auto pos = std::lower_bound(next.begin(), next.end(), std::make_pair(c, int32_t(-1)));
        if (pos == next.end() || pos->first != c) break;
        node = pos->second;
        if (t.trie[size_t(node)].token >= 0) {
          best = t.trie[size_t(node)].token;
          best_len = k + 1 - i;
        }
      }
      if (best < 0) {
        i++;
        continue;
      }
      const AddedToken& a = t.added[size_t(best)];
      size_t start = i, end = i + best_len;
      if (a.single_word &&
          ((start > 0 && is_word_char(s, prev_char(s, start))) || (end < s.size() && is_word_char(s, end)))) {
        i++;
        continue;
      }
      if (a.lstrip)
        while (start > seg_start) {
          const size_t p = prev_char(s, start);
          size_t q = p;
          if (!is_white_space(utf8_next(s, q))) break;
          start = p;
        }
      if (a.rstrip)
        while (end < s.size()) {
          size_t q = end;
          if (!is_white_space(utf8_next(s, q))) break;
          end = q;
        }
      segment(s.substr(seg_start, start - seg_start));
      if (ids) ids->push_back(a.id);
      seg_start = i = end;
    }
    segment(s.substr(seg_start));
  }

  static size_t prev_char(std::string_view s, size_t i) {
    do i--;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
    return i;
  }
};

// Step 4 for BPE: the ids of one word, through the cache.
struct BpeSink {
  const TokenizerImpl& t;
  TokenizerEncoder::State& st;
  static void call(void* self, std::string_view w) { static_cast<BpeSink*>(self)->word(w); }
  void word(std::string_view w) {
    std::vector<int32_t>& out = *st.out;
    if (w.size() == 1) {
      out.push_back(bpe_byte_token(t, static_cast<unsigned char>(w[0])));
      return;
    }
    const bool cacheable = w.size() <= kCacheMaxWordBytes;
    if (cacheable) {
      auto it = st.cache.find(w);
      if (it != st.cache.end()) {
        const size_t off = size_t(it->second >> 32), cnt = size_t(uint32_t(it->second));
        out.insert(out.end(), st.cache_ids.begin() + ptrdiff_t(off), st.cache_ids.begin() + ptrdiff_t(off + cnt));
        return;
      }
    }
    const size_t before = out.size();
    bool done = false;
    if (t.ignore_merges) {
      auto it = t.bytes_ids.find(w);
      if (it != t.bytes_ids.end()) {
        out.push_back(it->second);
        done = true;
      }
    }
    if (!done) bpe_merge_word(t, w, out);
    if (cacheable) {
      if (st.cache.size() >= kCacheMaxEntries) {
        st.cache.clear();
        st.cache_ids.clear();
      }
      const size_t off = st.cache_ids.size(), cnt = out.size() - before;
      st.cache_ids.insert(st.cache_ids.end(), out.begin() + ptrdiff_t(before), out.end());
      st.cache.emplace(std::string(w), (uint64_t(off) << 32) | cnt);
    }
  }
};

struct WordLevelSink {
  const TokenizerImpl& t;
  TokenizerEncoder::State& st;
  static void call(void* self, std::string_view w) { static_cast<WordLevelSink*>(self)->word(w); }
  void word(std::string_view w) {
    auto it = t.token_ids.find(w);
    if (it != t.token_ids.end()) {
      st.out->push_back(it->second);
    } else if (t.unk_id >= 0) {
      st.out->push_back(t.unk_id);
    } else {
      fail("[tokenizer] ", t.name, ": '", std::string(w.substr(0, 80)),
           "' is not in the WordLevel vocabulary and there is no unk_token");
    }
  }
};

}  // namespace

void TokenizerEncoder::encode(std::string_view text, std::vector<int32_t>& out) {
  utf8_check(text, "[tokenizer] input");
  st_->out = &out;
  if (impl_->model_type == "BPE") {
    BpeSink sink{*impl_, *st_};
    Pipeline{*impl_, *st_, &BpeSink::call, &sink}.text(text, &out);
  } else {
    WordLevelSink sink{*impl_, *st_};
    Pipeline{*impl_, *st_, &WordLevelSink::call, &sink}.text(text, &out);
  }
  st_->out = nullptr;
}

void TokenizerEncoder::pretokenize_fn(std::string_view text, void (*fn)(void*, std::string_view), void* ctx) {
  utf8_check(text, "[tokenizer] input");
  Pipeline{*impl_, *st_, fn, ctx}.text(text, nullptr);
}

}  // namespace aah
