// Text corpora, the part every source shares: split documents into train/validation, train the tokenizer, write
// the four files (data/corpus.h). The sources: corpus_brown.cpp, corpus_code.cpp, corpus_text.cpp (and synth.cpp).
#include "data/corpus.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>

#include "core/check.h"
#include "text/bpe_train.h"
#include "formats/checksum.h"
#include "core/files.h"
#include "data/shard.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace aah {

namespace {

const char* const kCorpusFiles[] = {"train.bin", "val.bin", "tokenizer.json", "meta.json"};

uint64_t split_hash(std::string_view text, uint64_t seed) {
  char sb[8];
  for (int i = 0; i < 8; i++) sb[i] = char(seed >> (8 * i));
  const std::array<uint8_t, 32> d = sha256({std::string_view(sb, 8), text});
  uint64_t h = 0;
  for (int i = 0; i < 8; i++) h |= uint64_t(d[i]) << (8 * i);
  return h;
}

std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}
std::string mb(int64_t bytes) { return fixed(double(bytes) / 1e6, 2); }

// The two sides of the split: the training texts (what the tokenizer learns from) and the sizes.
struct SplitSizes {
  std::vector<std::string_view> train_texts;
  int64_t train_bytes = 0, val_bytes = 0, n_val = 0;
};

SplitSizes split_sizes(const std::vector<CorpusDocument>& docs, const std::vector<uint8_t>& is_val) {
  SplitSizes s;
  for (size_t i = 0; i < docs.size(); i++) {
    if (is_val[i]) {
      s.val_bytes += int64_t(docs[i].text.size());
      s.n_val++;
    } else {
      s.train_bytes += int64_t(docs[i].text.size());
      s.train_texts.push_back(docs[i].text);
    }
  }
  return s;
}

// The ids of every document (OpenMP over documents), each led by <|endoftext|> (eot).
std::vector<std::vector<int32_t>> encode_documents(const Tokenizer& tok, int32_t eot,
                                                   const std::vector<CorpusDocument>& docs, const std::string& source) {
  std::vector<std::vector<int32_t>> ids(docs.size());
  std::string error;
#pragma omp parallel
  {
    TokenizerEncoder enc(tok);
#pragma omp for schedule(dynamic, 1)
    for (size_t i = 0; i < docs.size(); i++) {
      try {
        ids[i].push_back(eot);
        enc.encode(docs[i].text, ids[i]);
      } catch (const Error& e) {
#pragma omp critical(corpus_encode_error)
        if (error.empty()) error = str_cat("document ", docs[i].name, ": ", e.what());
      }
    }
  }
  if (!error.empty()) fail("[data] ", source, ": ", error);
  return ids;
}

// Size and SHA-256 of the files written so far, for meta.json.
nlohmann::json file_digests(const std::string& dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const char* f : {"train.bin", "val.bin", "tokenizer.json"}) {
    const std::string bytes = read_file(dir + "/" + f);
    files[f] = {{"bytes", bytes.size()}, {"sha256", sha256_hex(bytes)}};
  }
  return files;
}

}  // namespace

void corpus_check_out_dir(const std::string& dir, bool force) {
  if (dir.empty()) fail("[data] no output directory (--out)");
  // Even with --force: a run or suite stays what it is, and other files are never replaced.
  dir_check_kind(dir, DirKind::corpus, "[data]", "--out", force,
                 std::vector<std::string>(std::begin(kCorpusFiles), std::end(kCorpusFiles)));
  if (force) return;
  std::vector<std::string> present;
  for (const char* f : kCorpusFiles)
    if (file_exists(dir + "/" + f)) present.push_back(f);
  if (present.empty()) return;
  std::string list;
  for (const auto& p : present) list += (list.empty() ? "" : ", ") + p;
  fail("[data] ", dir, " already holds a corpus (", list, "); pass --force to overwrite it, or choose another --out");
}

bool corpus_is_val(std::string_view text, uint64_t seed, double val_fraction) {
  return double(split_hash(text, seed) >> 11) * 0x1.0p-53 < val_fraction;
}

std::vector<uint8_t> corpus_split(const std::vector<CorpusDocument>& docs, uint64_t seed, double val_fraction) {
  if (docs.size() < 2) fail("[data] need at least 2 documents to split train/validation, have ", docs.size());
  if (!(val_fraction > 0 && val_fraction < 1)) fail("[data] validation fraction ", val_fraction, " not in (0, 1)");
  std::vector<uint8_t> val(docs.size());
  std::vector<uint64_t> h(docs.size());
  size_t n_val = 0;
  for (size_t i = 0; i < docs.size(); i++) {
    h[i] = split_hash(docs[i].text, seed);
    val[i] = double(h[i] >> 11) * 0x1.0p-53 < val_fraction;
    n_val += val[i];
  }
  if (n_val == 0) val[size_t(std::min_element(h.begin(), h.end()) - h.begin())] = 1;
  if (n_val == docs.size()) val[size_t(std::max_element(h.begin(), h.end()) - h.begin())] = 0;
  return val;
}

nlohmann::json corpus_write(const std::string& source, const std::vector<CorpusDocument>& docs,
                            const CorpusOptions& opt, const nlohmann::json& source_meta) {
  corpus_check_out_dir(opt.out, opt.force);
  const auto t0 = std::chrono::steady_clock::now();
  auto say = [&](const std::string& s) {
    if (!opt.quiet) std::fprintf(stderr, "[data] %s: %s\n", source.c_str(), s.c_str());
  };
  for (const auto& d : docs) utf8_check(d.text, str_cat("[data] ", source, " document ", d.name));
  const std::vector<uint8_t> is_val = corpus_split(docs, opt.seed, opt.val_fraction);

  // Tokenizer, trained on the training split only.
  const SplitSizes split = split_sizes(docs, is_val);
  const size_t n_train = docs.size() - size_t(split.n_val);
  say(str_cat(docs.size(), " documents, ", mb(split.train_bytes + split.val_bytes), " MB; ", n_train, " train / ",
              split.n_val, " validation; training byte-level BPE, vocab ", opt.vocab_size));
  BpeTrainOptions bo;
  bo.vocab_size = opt.vocab_size;
  BpeTrainStats bs;
  const nlohmann::ordered_json tok_json = bpe_train(split.train_texts, bo, &bs);
  const std::string tok_text = tok_json.dump(2) + "\n";
  const Tokenizer tok = Tokenizer::from_json(nlohmann::json::parse(tok_text), opt.out + "/tokenizer.json");
  const int32_t eot = tok.token_to_id("<|endoftext|>");
  AAH_CHECK(eot >= 0);
  say(str_cat(bs.merges, " merges in ", fixed(bs.count_seconds + bs.merge_seconds, 2), " s; encoding"));
  if (bs.vocab_size < opt.vocab_size)
    say(str_cat("note: the training text ran out of pairs to merge; vocabulary ", bs.vocab_size, " instead of ",
                opt.vocab_size));

  std::vector<std::vector<int32_t>> ids = encode_documents(tok, eot, docs, source);
  std::vector<int32_t> train, val;
  std::vector<std::string> val_names;
  for (size_t i = 0; i < docs.size(); i++) {
    auto& dst = is_val[i] ? val : train;
    dst.insert(dst.end(), ids[i].begin(), ids[i].end());
    if (is_val[i]) val_names.push_back(docs[i].name);
    std::vector<int32_t>().swap(ids[i]);
  }

  make_dirs(opt.out);
  write_file_atomic(opt.out + "/tokenizer.json", tok_text);
  const uint32_t vocab = uint32_t(tok.vocab_size());
  shard_write(opt.out + "/train.bin", train, vocab);
  shard_write(opt.out + "/val.bin", val, vocab);
  const nlohmann::json files = file_digests(opt.out);
  nlohmann::json meta = {
      {"source", source},
      {"vocab_size", vocab},
      {"documents", docs.size()},
      {"train_documents", n_train},
      {"val_documents", split.n_val},
      {"train_bytes", split.train_bytes},
      {"val_bytes", split.val_bytes},
      {"train_tokens", train.size()},
      {"val_tokens", val.size()},
      {"bytes_per_token", train.empty() ? 0.0 : double(split.train_bytes) / double(train.size() - n_train)},
      {"split",
       str_cat("by document: validation when SHA-256(seed as 8 little-endian bytes || text), first 8 bytes as a "
               "little-endian integer, top 53 bits / 2^53 < ",
               opt.val_fraction, " (at least one document on each side)")},
      {"val_fraction", opt.val_fraction},
      {"seed", opt.seed},
      {"document_start", {{"token", "<|endoftext|>"}, {"id", eot}}},
      {"tokenizer",
       {{"file", "tokenizer.json"},
        {"type", "byte-level BPE (Hugging Face tokenizer.json, Qwen3 layout)"},
        {"trained_on", "train split"},
        {"vocab_size", vocab},
        {"vocab_size_requested", opt.vocab_size},
        {"merges", bs.merges},
        {"pretokenize_regex", kQwenPretokenizeRegex},
        {"normalizer", "NFC"},
        {"special_tokens", bo.special_tokens},
        {"train_words", bs.words},
        {"train_unique_words", bs.unique_words}}},
      {"files", files},
      {"elapsed_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}};
  if (val_names.size() <= 2000) meta["val_document_names"] = val_names;
  for (auto it = source_meta.begin(); it != source_meta.end(); ++it) meta[it.key()] = it.value();
  write_file_atomic(opt.out + "/meta.json", meta.dump(2) + "\n");
  say(str_cat("wrote ", opt.out, ": ", train.size(), " train tokens, ", val.size(), " validation tokens, vocab ",
              vocab));
  return meta;
}

}  // namespace aah
