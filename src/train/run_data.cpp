#include "train/run_data.h"

#include <filesystem>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "formats/checksum.h"
#include "core/files.h"
#include "text/tokenizer.h"

namespace aah {

namespace {

// "/a/b/" and "b/../b" -> "/a/b": the path the user gave, made absolute (links are kept as given).
std::string absolute_dir(const std::string& dir) {
  std::string p = std::filesystem::absolute(dir).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string short_sha(const std::string& sha) { return sha.empty() ? "none" : sha.substr(0, 12) + "..."; }

}  // namespace

RunData run_data_of(const std::string& dir, int64_t shard_vocab) {
  RunData d;
  d.dir = absolute_dir(dir);
  for (auto [name, sha] : {std::pair{"/train.bin", &d.train_sha256}, std::pair{"/val.bin", &d.val_sha256}})
    if (path_exists(dir + name)) *sha = sha256_hex(read_file(dir + name, size_t(1) << 40));
  const std::string tok = dir + "/tokenizer.json", meta = dir + "/meta.json";
  if (path_exists(tok)) {
    const std::string bytes = read_file(tok);
    d.tokenizer_sha256 = sha256_hex(bytes);
    d.vocab_size = Tokenizer::from_json(parse_json(bytes, tok), tok).vocab_size();
    d.vocab_from = "tokenizer.json";
    return d;
  }
  if (path_exists(meta)) {
    const nlohmann::json m = read_json_file(meta);
    if (m.is_object() && m.contains("vocab_size")) {
      if (!m["vocab_size"].is_number_integer() || m["vocab_size"].get<int64_t>() < 1)
        fail("[train] ", meta, ": vocab_size must be a positive integer, got ", m["vocab_size"].dump());
      d.vocab_size = m["vocab_size"].get<int64_t>();
      d.vocab_from = "meta.json";
      return d;
    }
  }
  d.vocab_size = shard_vocab;
  d.vocab_from = "train.bin";
  return d;
}

void run_data_save(const std::string& run, const RunData& d) {
  nlohmann::json j = {{"dir", d.dir}, {"vocab_size", d.vocab_size}, {"vocab_from", d.vocab_from}};
  j["tokenizer_sha256"] = d.tokenizer_sha256.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.tokenizer_sha256);
  for (auto [key, sha] : {std::pair{"train_sha256", &d.train_sha256}, std::pair{"val_sha256", &d.val_sha256}})
    if (!sha->empty()) j[key] = *sha;
  write_file_atomic(run + "/data.json", j.dump(2) + "\n");
}

std::optional<RunData> run_data_load(const std::string& run) {
  const std::string path = run + "/data.json";
  if (!path_exists(path)) return std::nullopt;
  const nlohmann::json j = read_json_file(path);
  auto bad = [&](const char* key, const char* want) {
    fail("[train] ", path, ": key '", key, "' must be ", want, " (the run's record of its data directory)");
  };
  if (!j.is_object()) fail("[train] ", path, ": expected a JSON object (the run's record of its data directory)");
  RunData d;
  if (!j.contains("dir") || !j["dir"].is_string() || j["dir"].get<std::string>().empty()) bad("dir", "a path");
  d.dir = j["dir"].get<std::string>();
  if (!j.contains("vocab_size") || !j["vocab_size"].is_number_integer() || j["vocab_size"].get<int64_t>() < 0)
    bad("vocab_size", "an integer >= 0");
  d.vocab_size = j["vocab_size"].get<int64_t>();
  if (j.contains("vocab_from")) {
    if (!j["vocab_from"].is_string()) bad("vocab_from", "a string");
    d.vocab_from = j["vocab_from"].get<std::string>();
  }
  if (j.contains("tokenizer_sha256") && !j["tokenizer_sha256"].is_null()) {
    if (!j["tokenizer_sha256"].is_string() || j["tokenizer_sha256"].get<std::string>().size() != 64)
      bad("tokenizer_sha256", "64 hex digits or null");
    d.tokenizer_sha256 = j["tokenizer_sha256"].get<std::string>();
  }
  for (auto [key, sha] : {std::pair{"train_sha256", &d.train_sha256}, std::pair{"val_sha256", &d.val_sha256}})
    if (j.contains(key)) {
      if (!j[key].is_string() || j[key].get<std::string>().size() != 64) bad(key, "64 hex digits");
      *sha = j[key].get<std::string>();
    }
  return d;
}

void run_data_check(const RunData& recorded, const RunData& given, const std::string& run) {
  // "--data G has ... than R" for another directory, "--data G has ... now" for the same one changed since.
  const bool same_dir = recorded.dir == given.dir;
  const std::string trained_on = recorded.dir.empty() ? "the run's data" : recorded.dir;
  const std::string head = str_cat("[train] --resume ", run, ": --data ", given.dir, " has ");
  if (recorded.vocab_size > 0 && given.vocab_size != recorded.vocab_size)
    fail(head, "vocabulary ", given.vocab_size, " (", given.vocab_from, ")", same_dir ? " now" : "",
         " but the run was trained on ", same_dir ? std::string("it") : trained_on, " with vocabulary ",
         recorded.vocab_size, " (", recorded.vocab_from, "): give the run's data, or start a new run");
  if (given.tokenizer_sha256 != recorded.tokenizer_sha256)
    fail(head, same_dir ? "another tokenizer.json now than when the run was trained on it" :
                          "another tokenizer.json than " + trained_on + ", which the run was trained on",
         " (SHA-256 ", short_sha(given.tokenizer_sha256), " against ", short_sha(recorded.tokenizer_sha256),
         "): the same ids would mean other text; give the run's data, or start a new run");
  for (auto [file, r, g] : {std::tuple{"train.bin", &recorded.train_sha256, &given.train_sha256},
                            std::tuple{"val.bin", &recorded.val_sha256, &given.val_sha256}})
    if (!r->empty() && !g->empty() && *r != *g)
      fail(head, same_dir ? str_cat("another ", file, " now than when the run started on it")
                          : str_cat("another ", file, " than ", trained_on, ", which the run started on"),
           " (SHA-256 ", short_sha(*g), " against ", short_sha(*r), "; regenerated or replaced?): resuming would ",
           "continue on other tokens; give the run's data, or start afresh (aah train --force)");
}

}  // namespace aah
