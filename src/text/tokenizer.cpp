// The Tokenizer's lookups, encode() and decode(). Loading: tokenizer_load.cpp; the encoding pipeline:
// tokenizer_encode.cpp; BPE of one word: bpe_merge.cpp; the regexes: tokenizer_regex.cpp.
#include "text/tokenizer.h"

#include "core/check.h"
#include "text/tokenizer_impl.h"

namespace aah {

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
const std::string& Tokenizer::model_type() const { return impl_->model_type; }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

int32_t Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->token_ids.find(token);
  return it == impl_->token_ids.end() ? -1 : it->second;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size) return "";
  return impl_->id_token[size_t(id)];
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  TokenizerEncoder enc(*this);
  std::vector<int32_t> ids;
  enc.encode(text, ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const TokenizerImpl& t = *impl_;
  std::string out;
  const bool words = t.model_type == "WordLevel";
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size || t.id_kind[size_t(id)] == 0)
      fail("[tokenizer] ", t.name, ": cannot decode id ", id,
           (id < 0 || id >= t.vocab_size) ? " (out of range, vocab size " : " (no token has it; vocab size ",
           t.vocab_size, ")");
    if (skip_special && t.id_kind[size_t(id)] == 3) continue;
    if (words && !first) out += ' ';
    out += t.id_bytes[size_t(id)];
    first = false;
  }
  return out;
}

}  // namespace aah
