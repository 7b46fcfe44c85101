// The data a run trains on, recorded in RUN/data.json: where it is and what vocabulary and tokenizer it has, so
// that `aah train --resume` finds it without --data and refuses a --data whose vocabulary or tokenizer differs.
//
//   {"dir": "/abs/path/to/data", "vocab_size": 96, "vocab_from": "tokenizer.json", "tokenizer_sha256": "9f86...",
//    "train_sha256": "...", "val_sha256": "..."}
//
// tokenizer_sha256 is null when the data directory has no tokenizer.json; train_sha256 / val_sha256 (of train.bin and
// val.bin, so that a regenerated or replaced corpus is not resumed on silently) are absent in runs of older aah.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace aah {

struct RunData {
  std::string dir;               // the data directory, absolute
  int64_t vocab_size = 0;        // the data's vocabulary (see run_data_of)
  std::string vocab_from;        // where vocab_size was read: "tokenizer.json", "meta.json" or "train.bin"
  std::string tokenizer_sha256;  // of DIR/tokenizer.json; "" when there is none
  std::string train_sha256, val_sha256;  // of DIR/train.bin and DIR/val.bin; "" unknown (not compared)
};

// The data directory DIR as a run records it. Its vocabulary is its tokenizer's (tokenizer.json: one more than the
// largest id), else meta.json's vocab_size, else `shard_vocab` (the larger of the shards' header vocabularies).
RunData run_data_of(const std::string& dir, int64_t shard_vocab);
void run_data_save(const std::string& run, const RunData& d);
// RUN/data.json; nullopt when the run has none (it was started before runs recorded their data). A data.json that
// is there but unreadable or malformed is an error naming it.
std::optional<RunData> run_data_load(const std::string& run);
// On --resume (with a --data, or the recorded directory): refuses `given` unless it has the vocabulary, the tokenizer
// and the token shards (by SHA-256 of tokenizer.json, train.bin and val.bin) of `recorded`, the data the run was
// trained on; the error says what differs and names both directories. Unknown (0, "") records are not compared.
void run_data_check(const RunData& recorded, const RunData& given, const std::string& run);

}  // namespace aah
