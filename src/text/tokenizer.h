// Hugging Face tokenizer.json: loader, encoder and decoder for byte-level BPE models (GPT-2, Qwen2/Qwen3,
// Llama-3 style) and for the WordLevel model that the synth corpus writes.
//
// Encoding follows the HF `tokenizers` pipeline:
//   1. added tokens (added_tokens[]: <|endoftext|>, <|im_start|>, ...) are found in the raw text first, leftmost
//      match, longest at a position (lstrip / rstrip / single_word honoured); the text between them goes on;
//   2. normalizer: NFC, NFD, NFKC, NFKD or a Sequence of them (utf8proc);
//   3. pre_tokenizer: Split (Oniguruma-style regex run by PCRE2 with UTF and UCP; \s, \w, \d and \h keep their
//      Oniguruma meaning), ByteLevel (with or without the GPT-2 regex, add_prefix_space), Digits,
//      WhitespaceSplit, or a Sequence of them;
//   4. model: BPE over the byte-level alphabet; a word's bytes start as single-byte tokens and the adjacent pair
//      with the lowest merge rank is merged first, the leftmost of equal ranks (ignore_merges honoured).
// The decoder (ByteLevel) maps each token back to its bytes; added tokens decode to their content.
// Not supported (a clear error names the key): other normalizers / pre-tokenizers / models, BPE dropout,
// byte_fallback, continuing_subword_prefix, end_of_word_suffix. post_processor is ignored: encode() adds no BOS.
//
// Text must be valid UTF-8: encode() throws aah::Error naming the offset of the first bad byte. Callers that
// want replacement instead run utf8_sanitize() first (each invalid subsequence -> U+FFFD, as HF's Python does).
// decode() returns the exact bytes (a partial multi-byte token sequence is not patched up).
//
// Every tokenizer.json is treated as untrusted: a malformed file gets an aah::Error "[tokenizer] FILE: KEY: what",
// never a crash.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace aah {

struct TokenizerImpl;
class TokenizerEncoder;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

class Tokenizer {
 public:
  // Reads and validates a tokenizer.json; errors name the file and the key.
  static Tokenizer load(const std::string& path);
  // Same from parsed JSON; `name` stands for the file in errors.
  static Tokenizer from_json(const nlohmann::json& j, const std::string& name);

  // One more than the largest id (model vocabulary and added tokens).
  int32_t vocab_size() const;
  // "BPE" or "WordLevel".
  const std::string& model_type() const;
  // The id of a token given by its tokenizer.json spelling (byte-level characters for BPE), or -1.
  int32_t token_to_id(std::string_view token) const;
  // The tokenizer.json spelling of an id ("" for an id no token has).
  std::string id_to_token(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;

  // Encodes valid UTF-8 (throws otherwise). Each call starts a fresh TokenizerEncoder; to encode many texts reuse
  // one TokenizerEncoder, which caches words.
  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes of the tokens (added tokens as their content). skip_special drops added tokens marked special.
  // Throws aah::Error for an id outside [0, vocab_size()) or one that no token has.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  const TokenizerImpl& impl() const { return *impl_; }

 private:
  Tokenizer() = default;  // only load() and from_json() make one
  std::shared_ptr<const TokenizerImpl> impl_;
  friend class TokenizerEncoder;
};

// Per-thread encoding state: a cache of recent words (pre-token -> ids) and regex match buffers. Not thread safe;
// use one per thread. The Tokenizer must outlive it.
class TokenizerEncoder {
 public:
  explicit TokenizerEncoder(const Tokenizer& tok);
  ~TokenizerEncoder();
  TokenizerEncoder(const TokenizerEncoder&) = delete;
  TokenizerEncoder& operator=(const TokenizerEncoder&) = delete;

  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<int32_t>& out);
  // Runs steps 1-3 only: calls word(piece) for every pre-token of the text between added tokens, after
  // normalization (the BPE trainer counts these). Added tokens are skipped.
  template <class F>
  void pretokenize(std::string_view text, F&& word) {
    pretokenize_fn(
        text, [](void* ctx, std::string_view w) { (*static_cast<F*>(ctx))(w); }, &word);
  }

  struct State;

 private:
  void pretokenize_fn(std::string_view text, void (*fn)(void*, std::string_view), void* ctx);
  const TokenizerImpl* impl_;
  std::unique_ptr<State> st_;
};

// The Qwen2/Qwen3 (and Llama-3 minus its {1,3} digit groups) pre-tokenization regex, in tokenizer.json syntax.
extern const char* const kQwenPretokenizeRegex;
// GPT-2's regex (what ByteLevel with use_regex=true applies).
extern const char* const kGpt2PretokenizeRegex;

}  // namespace aah
