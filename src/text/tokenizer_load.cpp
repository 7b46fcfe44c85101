// Loading a Hugging Face tokenizer.json into TokenizerImpl: the model (BPE or WordLevel), added tokens,
// normalizer and pre-tokenizer, each key checked, errors naming the file and the key.
#include "text/tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "core/check.h"
#include "core/files.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace aah {

namespace {

constexpr int32_t kMaxId = (1 << 24) - 1;  // ids above this are rejected (bounds every table we allocate)

using nlohmann::json;

struct Loader {
  TokenizerImpl& t;
  const std::string& name;
  int64_t id_limit = kMaxId;  // ids above 2 x (number of tokens) + 65536 are refused: bounds the tables

  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    fail("[tokenizer] ", name, ": ", key, ": ", what);
  }
  static std::string quote(std::string_view s) {
    std::string q = "'";
    for (unsigned char c : s.substr(0, 80)) {
      if (c < 0x20 || c == 0x7F) {
        char b[8];
        std::snprintf(b, sizeof b, "\\x%02X", c);
        q += b;
      } else {
        q += char(c);
      }
    }
    if (s.size() > 80) q += "...";
    return q + "'";
  }
  static const char* type_name(const json& j) { return j.type_name(); }

  const json* member(const json& obj, const char* key) const {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  bool get_bool(const json& obj, const char* key, const std::string& where, bool dflt) const {
    const json* v = member(obj, key);
    if (!v || v->is_null()) return dflt;
    if (!v->is_boolean()) bad(where + "." + key, str_cat("expected true or false, found ", type_name(*v)));
    return v->get<bool>();
  }
  std::string get_string(const json& obj, const char* key, const std::string& where, bool required) const {
    const json* v = member(obj, key);
    if (!v || v->is_null()) {
      if (required) bad(where + "." + key, "missing");
      return "";
    }
    if (!v->is_string()) bad(where + "." + key, str_cat("expected a string, found ", type_name(*v)));
    return v->get<std::string>();
  }
  int32_t get_id(const json& v, const std::string& where) const {
    if (!v.is_number_integer()) bad(where, str_cat("expected an integer id, found ", type_name(v)));
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > uint64_t(kMaxId)) bad(where, str_cat("id ", u, " out of range (at most ", kMaxId, ")"));
      return int32_t(u);
    }
    const int64_t s = v.get<int64_t>();
    if (s < 0 || s > kMaxId) bad(where, str_cat("id ", s, " out of range (0 to ", kMaxId, ")"));
    return int32_t(s);
  }
  std::string type_of(const json& obj, const std::string& where) const {
    if (!obj.is_object()) bad(where, str_cat("expected an object, found ", type_name(obj)));
    return get_string(obj, "type", where, true);
  }

  void grow(int32_t id, const std::string& where) {
    if (id > id_limit)
      bad(where, str_cat("id ", id, " is far past the number of tokens in the file (at most ", id_limit, " accepted)"));
    if (id >= int32_t(t.id_token.size())) {
      t.id_token.resize(size_t(id) + 1);
      t.id_bytes.resize(size_t(id) + 1);
      t.id_kind.resize(size_t(id) + 1, 0);
    }
  }

  void normalizer(const json& j, const std::string& where, int depth) {
    if (j.is_null()) return;
    if (depth > 8) bad(where, "nested too deeply");
    const std::string type = type_of(j, where);
    if (t.normalizers.size() >= 64) bad(where, "more than 64 normalizers");
    if (type == "NFC")
      t.normalizers.push_back(NormalForm::NFC);
    else if (type == "NFD")
      t.normalizers.push_back(NormalForm::NFD);
    else if (type == "NFKC")
      t.normalizers.push_back(NormalForm::NFKC);
    else if (type == "NFKD")
      t.normalizers.push_back(NormalForm::NFKD);
    else if (type == "Sequence") {
      const json* list = member(j, "normalizers");
      if (!list || !list->is_array()) bad(where + ".normalizers", "expected an array");
      for (size_t i = 0; i < list->size(); i++)
        normalizer((*list)[i], str_cat(where, ".normalizers[", i, "]"), depth + 1);
    } else {
      bad(where + ".type", str_cat("normalizer ", quote(type), " is not supported (NFC, NFD, NFKC, NFKD, Sequence)"));
    }
  }

  int add_regex(std::unique_ptr<Regex> re) {
    t.regexes.push_back(std::move(re));
    return int(t.regexes.size()) - 1;
  }

  void pre_tokenizer(const json& j, const std::string& where, int depth) {
    if (j.is_null()) return;
    if (depth > 8) bad(where, "nested too deeply");
    const std::string type = type_of(j, where);
    PreTokenizerStep s;
    if (type == "Sequence") {
      const json* list = member(j, "pretokenizers");
      if (!list || !list->is_array()) bad(where + ".pretokenizers", "expected an array");
      for (size_t i = 0; i < list->size(); i++)
        pre_tokenizer((*list)[i], str_cat(where, ".pretokenizers[", i, "]"), depth + 1);
      return;
    } else if (type == "Split") {
      const json* pat = member(j, "pattern");
      if (!pat || !pat->is_object()) bad(where + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
      if (pat->contains("Regex"))
        s.regex = add_regex(
            regex_compile(get_string(*pat, "Regex", where + ".pattern", true), name + ": " + where + ".pattern"));
      else if (pat->contains("String"))
        s.regex = add_regex(
            regex_literal(get_string(*pat, "String", where + ".pattern", true), name + ": " + where + ".pattern"));
      else
        bad(where + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
      const std::string b = get_string(j, "behavior", where, true);
      if (b == "Removed")
        s.behavior = SplitBehavior::Removed;
      else if (b == "Isolated")
        s.behavior = SplitBehavior::Isolated;
      else if (b == "MergedWithPrevious")
        s.behavior = SplitBehavior::MergedWithPrevious;
      else if (b == "MergedWithNext")
        s.behavior = SplitBehavior::MergedWithNext;
      else if (b == "Contiguous")
        s.behavior = SplitBehavior::Contiguous;
      else
        bad(where + ".behavior", str_cat("unknown behavior ", quote(b)));
      s.invert = get_bool(j, "invert", where, false);
    } else if (type == "ByteLevel") {
      s.add_prefix_space = get_bool(j, "add_prefix_space", where, true);
      if (get_bool(j, "use_regex", where, true))
        s.regex = add_regex(regex_compile(kGpt2PretokenizeRegex, name + ": " + where + " (GPT-2 regex)"));
      s.behavior = SplitBehavior::Isolated;
      t.byte_level = true;
    } else if (type == "Digits") {
      const bool individual = get_bool(j, "individual_digits", where, false);
      s.regex = add_regex(regex_compile("\\p{N}", name + ": " + where));
      s.behavior = individual ? SplitBehavior::Isolated : SplitBehavior::Contiguous;
    } else if (type == "WhitespaceSplit") {
      s.regex = add_regex(regex_compile("\\s+", name + ": " + where));
      s.behavior = SplitBehavior::Removed;
    } else {
      bad(where + ".type", str_cat("pre-tokenizer ", quote(type),
                                   " is not supported (Split, ByteLevel, Digits, WhitespaceSplit, Sequence)"));
    }
    if (t.steps.size() >= 64) bad(where, "more than 64 pre-tokenizer steps");
    t.steps.push_back(s);
  }

  // model.vocab: {token: id}
  void vocab(const json& v, const std::string& where) {
    if (!v.is_object()) bad(where, str_cat("expected an object {token: id}, found ", type_name(v)));
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string& tok = it.key();
      const int32_t id = get_id(it.value(), str_cat(where, "[", quote(tok), "]"));
      grow(id, str_cat(where, "[", quote(tok), "]"));
      if (t.id_kind[size_t(id)] != 0)
        bad(where, str_cat("tokens ", quote(t.id_token[size_t(id)]), " and ", quote(tok), " both have id ", id));
      if (tok.empty()) bad(where, str_cat("empty token (id ", id, ")"));
      t.id_kind[size_t(id)] = 1;
      t.id_token[size_t(id)] = tok;
      t.token_ids.emplace(tok, id);
    }
  }

  void bpe_model(const json& m) {
    const json* dropout = member(m, "dropout");
    if (dropout && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0))
      bad("model.dropout", "BPE dropout is not supported (must be null)");
    if (get_bool(m, "byte_fallback", "model", false)) bad("model.byte_fallback", "byte_fallback is not supported");
    if (!get_string(m, "continuing_subword_prefix", "model", false).empty())
      bad("model.continuing_subword_prefix", "not supported (must be empty)");
    if (!get_string(m, "end_of_word_suffix", "model", false).empty())
      bad("model.end_of_word_suffix", "not supported (must be empty)");
    t.ignore_merges = get_bool(m, "ignore_merges", "model", false);
    const json* v = member(m, "vocab");
    if (!v) bad("model.vocab", "missing");
    vocab(*v, "model.vocab");
    // Bytes of each model token; the single-byte ones start every word.
    for (auto& b : t.byte_id) b = -1;
    for (size_t id = 0; id < t.id_token.size(); id++) {
      if (t.id_kind[id] != 1) continue;
      std::string bytes;
      if (byte_level_decode(t.id_token[id], bytes)) {
        if (bytes.size() == 1) t.byte_id[static_cast<unsigned char>(bytes[0])] = int32_t(id);
        t.bytes_ids.emplace(bytes, int32_t(id));
        t.id_bytes[id] = std::move(bytes);
      } else {
        t.id_bytes[id] = t.id_token[id];  // not in the byte-level alphabet: decodes as written
      }
    }
    const std::string unk = get_string(m, "unk_token", "model", false);
    if (!unk.empty()) {
      auto it = t.token_ids.find(unk);
      if (it == t.token_ids.end()) bad("model.unk_token", str_cat(quote(unk), " is not in model.vocab"));
      t.unk_id = it->second;
    }
    const json* merges = member(m, "merges");
    if (!merges) bad("model.merges", "missing");
    if (!merges->is_array()) bad("model.merges", str_cat("expected an array, found ", type_name(*merges)));
    t.merges.reserve(merges->size());
    auto model_id = [&](const std::string& tok, const std::string& where, const char* what) {
      auto it = t.token_ids.find(tok);
      if (it == t.token_ids.end() || t.id_kind[size_t(it->second)] != 1)
        bad(where, str_cat(what, " ", quote(tok), " is not in model.vocab"));
      return it->second;
    };
    for (size_t r = 0; r < merges->size(); r++) {
      const json& e = (*merges)[r];
      const std::string where = str_cat("model.merges[", r, "]");
      std::string a, b;
      if (e.is_string()) {
        const std::string& s = e.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos || sp == 0 || sp + 1 == s.size())
          bad(where, str_cat(quote(s), " is not of the form 'A B'"));
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        bad(where, str_cat("expected \"A B\" or [\"A\", \"B\"], found ", type_name(e)));
      }
      const int32_t ia = model_id(a, where, "token"), ib = model_id(b, where, "token");
      const int32_t im = model_id(a + b, where, "merged token");
      // A repeated pair keeps its first (lowest) rank, as HF does.
      t.merges.insert(PairMap::key(uint32_t(ia), uint32_t(ib)), (uint64_t(r) << 32) | uint32_t(im));
    }
  }

  void wordlevel_model(const json& m) {
    const json* v = member(m, "vocab");
    if (!v) bad("model.vocab", "missing");
    vocab(*v, "model.vocab");
    for (size_t id = 0; id < t.id_token.size(); id++) t.id_bytes[id] = t.id_token[id];
    const std::string unk = get_string(m, "unk_token", "model", false);
    if (!unk.empty()) {
      auto it = t.token_ids.find(unk);
      if (it != t.token_ids.end()) t.unk_id = it->second;  // HF allows an unk_token outside the vocab
    }
  }

  void added_tokens(const json& list) {
    if (list.is_null()) return;
    if (!list.is_array()) bad("added_tokens", str_cat("expected an array, found ", type_name(list)));
    StringMap<int32_t> seen;
    for (size_t i = 0; i < list.size(); i++) {
      const json& e = list[i];
      const std::string where = str_cat("added_tokens[", i, "]");
      if (!e.is_object()) bad(where, str_cat("expected an object, found ", type_name(e)));
      AddedToken a;
      const json* id = member(e, "id");
      if (!id) bad(where + ".id", "missing");
      a.id = get_id(*id, where + ".id");
      a.content = get_string(e, "content", where, true);
      if (a.content.empty()) bad(where + ".content", "empty");
      a.special = get_bool(e, "special", where, false);
      a.lstrip = get_bool(e, "lstrip", where, false);
      a.rstrip = get_bool(e, "rstrip", where, false);
      a.single_word = get_bool(e, "single_word", where, false);
      a.normalized = get_bool(e, "normalized", where, !a.special);
      if (!seen.emplace(a.content, a.id).second) bad(where + ".content", str_cat(quote(a.content), " appears twice"));
      grow(a.id, where + ".id");
      const uint8_t kind = t.id_kind[size_t(a.id)];
      if (kind == 1 && t.id_token[size_t(a.id)] != a.content)
        bad(where,
            str_cat("id ", a.id, " is ", quote(t.id_token[size_t(a.id)]), " in model.vocab, not ", quote(a.content)));
      if (kind >= 2) bad(where, str_cat("id ", a.id, " is used by another added token"));
      auto it = t.token_ids.find(a.content);
      if (it != t.token_ids.end() && it->second != a.id)
        bad(where, str_cat(quote(a.content), " has id ", a.id, " but model.vocab gives it ", it->second));
      t.id_kind[size_t(a.id)] = a.special ? 3 : 2;
      t.id_token[size_t(a.id)] = a.content;
      t.id_bytes[size_t(a.id)] = a.content;
      t.token_ids[a.content] = a.id;
      t.added.push_back(std::move(a));
    }
    // Byte trie of the contents.
    t.trie.assign(1, {});
    for (size_t k = 0; k < t.added.size(); k++) {
      int32_t node = 0;
      for (unsigned char c : t.added[k].content) {
        auto& next = t.trie[size_t(node)].next;
        auto pos = std::lower_bound(next.begin(), next.end(), std::make_pair(c, int32_t(-1)));
        if (pos != next.end() && pos->first == c) {
          node = pos->second;
        } else {
          const int32_t child = int32_t(t.trie.size());
          next.insert(pos, {c, child});
          t.trie.emplace_back();
          node = child;
        }
      }
      t.trie[size_t(node)].token = int32_t(k);
      t.first_byte[static_cast<unsigned char>(t.added[k].content[0])] = true;
    }
  }

  void load(const json& j) {
    if (!j.is_object()) bad("(top level)", str_cat("expected a JSON object, found ", type_name(j)));
    const json* model = member(j, "model");
    if (!model) bad("model", "missing");
    if (!model->is_object()) bad("model", str_cat("expected an object, found ", type_name(*model)));
    {
      int64_t n = 0;
      if (const json* v = member(*model, "vocab"); v && v->is_object()) n += int64_t(v->size());
      if (const json* a = member(j, "added_tokens"); a && a->is_array()) n += int64_t(a->size());
      id_limit = std::min<int64_t>(kMaxId, 2 * n + 65536);
    }
    std::string type = get_string(*model, "type", "model", false);
    if (type.empty() && model->contains("merges")) type = "BPE";
    if (type == "BPE")
      bpe_model(*model);
    else if (type == "WordLevel")
      wordlevel_model(*model);
    else
      bad("model.type", str_cat("model ", quote(type), " is not supported (BPE, WordLevel)"));
    t.model_type = type;
    if (const json* a = member(j, "added_tokens")) added_tokens(*a);
    if (const json* n = member(j, "normalizer")) normalizer(*n, "normalizer", 0);
    if (const json* p = member(j, "pre_tokenizer")) pre_tokenizer(*p, "pre_tokenizer", 0);
    if (const json* d = member(j, "decoder"); d && !d->is_null()) {
      const std::string dt = type_of(*d, "decoder");
      if (!(dt == "ByteLevel" && type == "BPE"))
        bad("decoder.type", str_cat("decoder ", quote(dt), " is not supported with a ", type,
                                    " model (BPE: ByteLevel or none; WordLevel: none)"));
    }
    if (type == "BPE" && !t.byte_level)
      bad("pre_tokenizer", "a BPE model needs a ByteLevel pre-tokenizer (only byte-level BPE is supported)");
    if (type == "WordLevel" && t.byte_level) bad("pre_tokenizer", "ByteLevel does not go with a WordLevel model");
    t.vocab_size = int32_t(t.id_token.size());
    if (t.vocab_size == 0) bad("model.vocab", "empty");
  }
};

}  // namespace

Tokenizer Tokenizer::from_json(const nlohmann::json& j, const std::string& name) {
  auto impl = std::make_shared<TokenizerImpl>();
  impl->name = name;
  try {
    Loader{*impl, name}.load(j);
  } catch (const nlohmann::json::exception& e) {  // a type the checks above missed: still name the file
    fail("[tokenizer] ", name, ": ", e.what());
  }
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

Tokenizer Tokenizer::load(const std::string& path) { return from_json(read_json_file(path), path); }

}  // namespace aah
