// libFuzzer target: a Hugging Face tokenizer.json, then encode / decode of a little text with the tokenizer it
// describes (normalizer, pre-tokenizer regexes, BPE merges, added tokens all come from the input).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fuzz_common.h"
#include "core/files.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

using namespace aah;

namespace {

const char* const kTexts[] = {
    "Hello, world! It's 2024: x = 3.14 * y;\n\tindent  two  spaces",
    "<|endoftext|>caf\xc3\xa9 na\xc3\xafve \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 <|im_start|>user\n",
    "a b c d e f 0 1 2 3 <unk> the the the",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::accepts([&] {
    const Tokenizer tok = Tokenizer::from_json(parse_json(fuzz::bytes_of(data, size), "fuzz.json"), "fuzz.json");
    const int32_t V = tok.vocab_size();
    AAH_FUZZ_ASSERT(V > 0);
    for (const char* text : kTexts) {
      std::vector<int32_t> ids;
      if (!fuzz::accepts([&] { ids = tok.encode(text); })) continue;  // e.g. an unknown word without unk_token
      for (int32_t id : ids) AAH_FUZZ_ASSERT(id >= 0 && id < V);
      fuzz::accepts([&] { tok.decode(ids); });
      fuzz::accepts([&] { tok.decode(ids, true); });
    }
    // Every token (the first few hundred) decodes, and its decoded text encodes again.
    std::vector<int32_t> all;
    for (int32_t id = 0; id < V && id < 300; id++) {
      const std::string s = tok.id_to_token(id);
      if (!s.empty()) AAH_FUZZ_ASSERT(tok.token_to_id(s) >= 0);
      all.push_back(id);
    }
    std::string text;
    if (fuzz::accepts([&] { text = tok.decode(all); })) fuzz::accepts([&] { tok.encode(utf8_sanitize(text)); });
    // Ids outside the vocabulary are errors.
    const int32_t out[] = {V, -1};
    AAH_FUZZ_ASSERT(!fuzz::accepts([&] { tok.decode(out); }));
  });
  return 0;
}
