// Byte-level BPE training that writes a Hugging Face tokenizer.json laid out like Qwen3's: NFC normalizer,
// pre_tokenizer Sequence[Split(regex, Isolated), ByteLevel(add_prefix_space=false, use_regex=false)], ByteLevel
// post-processor and decoder, model BPE {vocab, merges as [a, b] pairs}, special tokens in added_tokens.
//
// Ids: 0-255 are the 256 byte tokens in the order of their byte-level characters (as GPT-2 and Qwen number
// them: '!' = 0, ..., 'Ġ' (space) = 220), then one id per new token in merge order, then the special tokens.
//
// The algorithm is the standard one (HF tokenizers' BpeTrainer): count the pre-token words once, then repeat:
// take the most frequent adjacent pair, merge it in every word that holds it (found through a pair -> words
// index), and update the pair counts incrementally. Ties go as in HF: the highest count first, then the smallest
// pair (left id, then right id). A merge whose bytes already have a token reuses it. Training stops when the
// vocabulary (bytes + tokens + specials) reaches vocab_size or no pair occurs min_frequency times (at least once).
// One difference from HF: HF only merges in the words that its queue entry recorded, which on rare inputs misses
// a word that gained the pair through an earlier merge; here every word that holds the pair is merged.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace aah {

struct BpeTrainOptions {
  int vocab_size = 8192;      // total: 256 bytes + merged tokens + special tokens
  int64_t min_frequency = 0;  // a pair must occur at least this often (and at least once) to be merged
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
  std::string pattern;   // Split regex; empty: kQwenPretokenizeRegex
  bool verbose = false;  // progress on stderr
};

struct BpeTrainStats {
  int64_t bytes = 0, words = 0, unique_words = 0, merges = 0, vocab_size = 0;
  double count_seconds = 0, merge_seconds = 0;
};

// Counts the pre-token words of each text (after NFC, special tokens split out; OpenMP over texts).
std::vector<std::pair<std::string, int64_t>> bpe_count_words(const std::vector<std::string_view>& texts,
                                                             const BpeTrainOptions& opt, BpeTrainStats* stats);
// Learns merges from word counts (words as raw bytes) and returns the tokenizer.json.
nlohmann::ordered_json bpe_train_words(const std::vector<std::pair<std::string, int64_t>>& words,
                                       const BpeTrainOptions& opt, BpeTrainStats* stats = nullptr);
// Both steps.
nlohmann::ordered_json bpe_train(const std::vector<std::string_view>& texts, const BpeTrainOptions& opt,
                                 BpeTrainStats* stats = nullptr);
// The tokenizer.json of a byte-level BPE with the given merges (pairs of ids, in rank order) and no other tokens
// than the bytes, the merges' results and `special_tokens`: what bpe_train_words builds around its merges.
nlohmann::ordered_json bpe_tokenizer_json(const std::vector<std::string>& id_bytes,
                                          const std::vector<std::pair<int32_t, int32_t>>& merges,
                                          const BpeTrainOptions& opt);
// The 256 single-byte tokens in id order (bytes sorted by their byte-level character).
std::vector<std::string> bpe_byte_alphabet();

}  // namespace aah
