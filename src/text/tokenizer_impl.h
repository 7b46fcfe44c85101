// Internals of the tokenizer (text/tokenizer*.cpp, text/bpe_merge.cpp) shared between its files, with the BPE trainer
// (text/bpe_train.cpp) and with the tests: the PCRE2 regex wrapper, an open-addressing map for merge pairs, and the
// loaded tokenizer's tables.
#pragma once
#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/tokenizer.h"
#include "text/unicode.h"

namespace aah {

// Hashing for unordered_map<std::string, V> lookups by string_view without a temporary string.
struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct SvEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, SvHash, SvEq>;

// uint64 -> uint64 hash map, linear probing, no deletion. Keys must not be kEmpty.
class PairMap {
 public:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  static uint64_t key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, 0);
    mask_ = cap - 1;
    shift_ = 64 - std::countr_zero(cap);
    size_ = 0;
  }
  // Inserts unless present; returns false (and leaves the old value) when the key was there.
  bool insert(uint64_t k, uint64_t v) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    size_t i = slot(k);
    while (keys_[i] != kEmpty) {
      if (keys_[i] == k) return false;
      i = (i + 1) & mask_;
    }
    keys_[i] = k;
    vals_[i] = v;
    size_++;
    return true;
  }
  const uint64_t* find(uint64_t k) const {
    if (keys_.empty()) return nullptr;
    size_t i = slot(k);
    while (keys_[i] != kEmpty) {
      if (keys_[i] == k) return &vals_[i];
      i = (i + 1) & mask_;
    }
    return nullptr;
  }
  uint64_t* find(uint64_t k) { return const_cast<uint64_t*>(static_cast<const PairMap*>(this)->find(k)); }
  size_t size() const { return size_; }

 private:
  // Fibonacci hashing: the top bits of the product depend on every bit of the key.
  size_t slot(uint64_t k) const { return size_t((k * 0x9E3779B97F4A7C15ull) >> shift_); }
  void grow() {
    std::vector<uint64_t> k = std::move(keys_), v = std::move(vals_);
    reserve(k.empty() ? 8 : k.size());
    for (size_t i = 0; i < k.size(); i++)
      if (k[i] != kEmpty) insert(k[i], v[i]);
  }
  std::vector<uint64_t> keys_, vals_;
  size_t mask_ = 0, size_ = 0;
  int shift_ = 60;
};

// A compiled regex (PCRE2, UTF + UCP, JIT when available). `pattern` is the tokenizer.json (Oniguruma) spelling.
struct Regex {
  std::string pattern;
  void* code = nullptr;  // pcre2_code_8*
  bool jit = false;
  Regex() = default;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex();
};
// Compiles an Oniguruma-syntax pattern (what HF tokenizers uses); `where` names it in errors.
std::unique_ptr<Regex> regex_compile(const std::string& pattern, const std::string& where);
// A literal string as a regex.
std::unique_ptr<Regex> regex_literal(const std::string& text, const std::string& where);
// The PCRE2 spelling of an Oniguruma pattern: \s \S \w \W \d \D \h \H rewritten to explicit Unicode properties.
std::string regex_translate_onig(const std::string& pattern, const std::string& where);

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  int regex = -1;  // index into TokenizerImpl::regexes; -1: no split (ByteLevel without its regex)
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel: prepend ' ' to a piece that does not start with one
};

struct TokenizerImpl {
  std::string name;                   // the file, for errors
  std::string model_type;             // "BPE" | "WordLevel"
  int32_t vocab_size = 0;             // max id + 1
  std::vector<std::string> id_token;  // tokenizer.json spelling per id ("" where no token)
  std::vector<std::string> id_bytes;  // decoded bytes per id
  std::vector<uint8_t> id_kind;       // 0 none, 1 model token, 2 added token, 3 added special token
  StringMap<int32_t> token_ids;       // spelling -> id (model vocab and added tokens)
  // BPE
  StringMap<int32_t> bytes_ids;  // raw bytes -> id, for byte-level model tokens (ignore_merges, trainer checks)
  int32_t byte_id[256];          // single-byte token per byte, -1 if the vocab lacks it
  PairMap merges;                // key(a, b) -> (rank << 32) | merged id
  bool ignore_merges = false;
  int32_t unk_id = -1;
  // Pipeline
  std::vector<NormalForm> normalizers;
  std::vector<std::unique_ptr<Regex>> regexes;
  std::vector<PreTokenizerStep> steps;
  bool byte_level = false;  // a ByteLevel pre-tokenizer step maps bytes (required for BPE)
  // Added tokens, matched on the raw text with a byte trie.
  std::vector<AddedToken> added;
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t token = -1;                             // index into `added`
  };
  std::vector<TrieNode> trie;
  bool first_byte[256] = {};
};

// The single-byte token of byte `b`: the vocabulary's, else the unk token; throws when there is neither.
int32_t bpe_byte_token(const TokenizerImpl& t, unsigned char b);
// BPE of one word given as bytes; appends ids. Words up to `heap_threshold` bytes use an array scan, longer ones a
// heap over a linked list; both merge the lowest rank first, leftmost among equals. Throws for a byte the
// vocabulary lacks when there is no unk token.
void bpe_merge_word(const TokenizerImpl& t, std::string_view word, std::vector<int32_t>& out,
                    size_t heap_threshold = 48);

}  // namespace aah
