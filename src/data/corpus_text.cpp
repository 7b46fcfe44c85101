// `aah data text`: the user's UTF-8 text, one document per file, per blank-line separated block or per block
// between separator lines (data/corpus.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/check.h"
#include "data/corpus.h"
#include "core/files.h"
#include "text/unicode.h"

namespace aah {

namespace fs = std::filesystem;

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
