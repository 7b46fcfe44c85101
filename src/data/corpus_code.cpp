// `aah data code`: the Python 3.11 standard library, one document per .py file (data/corpus.h).
#include <algorithm>
#include <filesystem>

#include "core/check.h"
#include "core/process.h"
#include "data/corpus.h"
#include "core/files.h"
#include "text/unicode.h"

namespace aah {

namespace fs = std::filesystem;

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
  if (process_run({"dpkg-query", "-W", "-f=${Version}", "libpython3.11-stdlib"}, {.output = &version}) != 0)
    version = "";
  nlohmann::json meta = {
      {"description", "Python 3.11 standard library source (.py files), one document per file"},
      {"origin", {{"directory", root}, {"debian_package", "libpython3.11-stdlib"}, {"version", version}}}};
  return corpus_write("code", docs, opt, meta);
}

}  // namespace aah
