#include "text/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <queue>

#include "core/check.h"
#include "core/files.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace aah {

const char* const kQwenPretokenizeRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt2PretokenizeRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

constexpr int32_t kMaxId = (1 << 24) - 1;  // ids above this are rejected (bounds every table we allocate)
constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kCacheMaxEntries = size_t(1) << 18;

// Unicode White_Space (what \s means in Oniguruma and char::is_whitespace in Rust).
bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Regex

Regex::~Regex() {
  if (code) pcre2_code_free(static_cast<pcre2_code*>(code));
}

std::string regex_translate_onig(const std::string& p, const std::string& where) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  size_t class_start = 0;  // index in p just after '[' or '[^'
  for (size_t i = 0; i < p.size(); i++) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      const char* rep = nullptr;
      switch (e) {
        case 's':
          rep = "\\p{White_Space}";
          break;
        case 'S':
          rep = "\\P{White_Space}";
          break;
        case 'd':
          rep = "\\p{Nd}";
          break;
        case 'D':
          rep = "\\P{Nd}";
          break;
        case 'w':
          rep = in_class ? "\\p{L}\\p{M}\\p{Nd}\\p{Pc}" : "[\\p{L}\\p{M}\\p{Nd}\\p{Pc}]";
          break;
        case 'h':
          rep = in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
          break;
        case 'W':
        case 'H':
          if (in_class) fail("[tokenizer] ", where, ": \\", e, " inside a character class is not supported");
          rep = e == 'W' ? "[^\\p{L}\\p{M}\\p{Nd}\\p{Pc}]" : "[^0-9a-fA-F]";
          break;
        default:
          break;
      }
      if (rep) {
        out += rep;
      } else {
        out += c;
        out += e;
      }
      i++;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      class_start = i + 1;
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class [:alpha:]
      const size_t end = p.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(p, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == '[') fail("[tokenizer] ", where, ": nested character classes are not supported");
    if (in_class && c == ']' && i != class_start) in_class = false;
    out += c;
  }
  return out;
}

namespace {

std::unique_ptr<Regex> regex_compile_pcre(const std::string& pattern, const std::string& pcre,
                                          const std::string& where) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("[tokenizer] ", where, ": regex '", pattern, "' does not compile: ", reinterpret_cast<const char*>(msg),
         " (at offset ", off, " of '", pcre, "')");
  }
  auto re = std::make_unique<Regex>();
  re->pattern = pattern;
  re->code = code;
  re->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return re;
}

}  // namespace

std::unique_ptr<Regex> regex_compile(const std::string& pattern, const std::string& where) {
  utf8_check(pattern, "[tokenizer] " + where + ": regex");
  return regex_compile_pcre(pattern, regex_translate_onig(pattern, where), where);
}

std::unique_ptr<Regex> regex_literal(const std::string& text, const std::string& where) {
  utf8_check(text, "[tokenizer] " + where + ": string");
  std::string pcre;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) pcre += '\\';
    if (c == 0) {
      pcre.pop_back();
      pcre += "\\x{0}";
      continue;
    }
    pcre += c;
  }
  return regex_compile_pcre(text, pcre, where);
}

// ---------------------------------------------------------------------------------------------------------------
// Loading tokenizer.json

namespace {

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

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
const std::string& Tokenizer::model_type() const { return impl_->model_type; }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

int32_t Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->token_ids.find(token);
  return it == impl_->token_ids.end() ? -1 : it->second;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size) return "";
  return impl_->id_token[size_t(id)];
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  TokenizerEncoder enc(*this);
  std::vector<int32_t> ids;
  enc.encode(text, ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const TokenizerImpl& t = *impl_;
  std::string out;
  const bool words = t.model_type == "WordLevel";
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size || t.id_kind[size_t(id)] == 0)
      fail("[tokenizer] ", t.name, ": cannot decode id ", id,
           (id < 0 || id >= t.vocab_size) ? " (out of range, vocab size " : " (no token has it; vocab size ",
           t.vocab_size, ")");
    if (skip_special && t.id_kind[size_t(id)] == 3) continue;
    if (words && !first) out += ' ';
    out += t.id_bytes[size_t(id)];
    first = false;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// BPE of one word

namespace {

int32_t byte_token(const TokenizerImpl& t, unsigned char b) {
  const int32_t id = t.byte_id[b];
  if (id >= 0) return id;
  if (t.unk_id >= 0) return t.unk_id;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", unsigned(b));
  fail("[tokenizer] ", t.name, ": byte ", hex, " has no token in model.vocab and there is no unk_token");
}

inline bool lookup_merge(const TokenizerImpl& t, int32_t a, int32_t b, uint32_t& rank, int32_t& merged) {
  const uint64_t* v = t.merges.find(PairMap::key(uint32_t(a), uint32_t(b)));
  if (!v) return false;
  rank = uint32_t(*v >> 32);
  merged = int32_t(uint32_t(*v));
  return true;
}

void bpe_merge_small(const TokenizerImpl& t, std::string_view w, std::vector<int32_t>& out) {
  constexpr uint32_t kNone = ~0u;
  const size_t n = w.size();
  int32_t sym[64 + 1];
  uint32_t rank[64 + 1];
  int32_t nid[64 + 1];
  for (size_t i = 0; i < n; i++) sym[i] = byte_token(t, static_cast<unsigned char>(w[i]));
  auto pair_at = [&](size_t i) {
    if (!lookup_merge(t, sym[i], sym[i + 1], rank[i], nid[i])) rank[i] = kNone;
  };
  size_t m = n;
  for (size_t i = 0; i + 1 < m; i++) pair_at(i);
  while (m > 1) {
    uint32_t best = kNone;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < m; i++)
      if (rank[i] < best) {
        best = rank[i];
        bi = i;
      }
    if (best == kNone) break;
    sym[bi] = nid[bi];
    // Remove symbol bi+1: symbols after it and the pairs after pair bi shift down by one.
    for (size_t i = bi + 1; i + 1 < m; i++) sym[i] = sym[i + 1];
    for (size_t i = bi + 1; i + 2 < m; i++) {
      rank[i] = rank[i + 1];
      nid[i] = nid[i + 1];
    }
    m--;
    if (bi > 0) pair_at(bi - 1);
    if (bi + 1 < m) pair_at(bi);
  }
  out.insert(out.end(), sym, sym + m);
}

void bpe_merge_heap(const TokenizerImpl& t, std::string_view w, std::vector<int32_t>& out) {
  const size_t n = w.size();
  struct Sym {
    int32_t id, prev, next;
  };
  struct Entry {
    uint32_t rank;
    int32_t pos, left, right, merged;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Sym> s(n);
  for (size_t i = 0; i < n; i++)
    s[i] = {byte_token(t, static_cast<unsigned char>(w[i])), int32_t(i) - 1, i + 1 < n ? int32_t(i + 1) : -1};
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> q;
  auto push = [&](int32_t pos) {
    const int32_t nx = s[size_t(pos)].next;
    if (nx < 0) return;
    uint32_t r;
    int32_t merged;
    if (lookup_merge(t, s[size_t(pos)].id, s[size_t(nx)].id, r, merged))
      q.push({r, pos, s[size_t(pos)].id, s[size_t(nx)].id, merged});
  };
  for (size_t i = 0; i + 1 < n; i++) push(int32_t(i));
  while (!q.empty()) {
    const Entry e = q.top();
    q.pop();
    Sym& a = s[size_t(e.pos)];
    if (a.id != e.left || a.next < 0 || s[size_t(a.next)].id != e.right) continue;  // stale
    Sym& b = s[size_t(a.next)];
    a.id = e.merged;
    a.next = b.next;
    if (b.next >= 0) s[size_t(b.next)].prev = e.pos;
    b.id = -1;
    b.next = -1;
    if (a.prev >= 0) push(a.prev);
    push(e.pos);
  }
  for (int32_t i = 0; i >= 0; i = s[size_t(i)].next) out.push_back(s[size_t(i)].id);
}

}  // namespace

void bpe_merge_word(const TokenizerImpl& t, std::string_view word, std::vector<int32_t>& out, size_t heap_threshold) {
  if (word.empty()) return;
  if (word.size() <= std::min<size_t>(heap_threshold, 64))
    bpe_merge_small(t, word, out);
  else
    bpe_merge_heap(t, word, out);
}

// ---------------------------------------------------------------------------------------------------------------
// Encoding

struct TokenizerEncoder::State {
  std::vector<pcre2_match_data*> md;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  // Per pre-tokenizer step: its pieces (start, end, is_match) and the buffer for a prefixed piece.
  struct Span {
    size_t start, end;
    bool match;
  };
  std::vector<std::vector<Span>> spans;
  std::vector<std::string> prefixed;
  std::string norm[2];
  // Word cache: bytes -> (offset << 32 | count) into cache_ids.
  StringMap<uint64_t> cache;
  std::vector<int32_t> cache_ids;
  std::vector<int32_t>* out = nullptr;
  ~State() {
    for (auto* m : md) pcre2_match_data_free(m);
    if (mctx) pcre2_match_context_free(mctx);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
};

TokenizerEncoder::TokenizerEncoder(const Tokenizer& tok) : impl_(tok.impl_.get()), st_(std::make_unique<State>()) {
  const TokenizerImpl& t = *impl_;
  for (const auto& re : t.regexes)
    st_->md.push_back(pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(re->code), nullptr));
  st_->mctx = pcre2_match_context_create(nullptr);
  st_->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  if (st_->mctx && st_->jit_stack) pcre2_jit_stack_assign(st_->mctx, nullptr, st_->jit_stack);
  st_->spans.resize(t.steps.size());
  st_->prefixed.resize(t.steps.size());
}

TokenizerEncoder::~TokenizerEncoder() = default;

namespace {

using Sink = void (*)(void*, std::string_view);

struct Pipeline {
  const TokenizerImpl& t;
  TokenizerEncoder::State& st;
  Sink sink;
  void* ctx;

  // Finds the next non-empty match of regex `ri` in s at or after `from`; false when there is none.
  bool next_match(int ri, std::string_view s, size_t from, size_t& ms, size_t& me) {
    const Regex& re = *t.regexes[size_t(ri)];
    auto* code = static_cast<pcre2_code*>(re.code);
    pcre2_match_data* md = st.md[size_t(ri)];
    while (from <= s.size()) {
      const auto* subj = reinterpret_cast<PCRE2_SPTR>(s.data());
      const int rc = re.jit ? pcre2_jit_match(code, subj, s.size(), from, 0, md, st.mctx)
                            : pcre2_match(code, subj, s.size(), from, PCRE2_NO_UTF_CHECK, md, st.mctx);
      if (rc == PCRE2_ERROR_NOMATCH) return false;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fail("[tokenizer] ", t.name, ": regex '", re.pattern,
             "' failed on the input: ", reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      ms = ov[0];
      me = ov[1];
      if (me > ms) return true;
      // Empty match: skip one character and look again.
      if (ms >= s.size()) return false;
      from = ms + 1;
      while (from < s.size() && (static_cast<unsigned char>(s[from]) & 0xC0) == 0x80) from++;
    }
    return false;
  }

  void run(size_t depth, std::string_view piece) {
    if (piece.empty()) return;
    if (depth == t.steps.size()) {
      sink(ctx, piece);
      return;
    }
    const PreTokenizerStep& s = t.steps[depth];
    if (s.add_prefix_space && piece[0] != ' ') {
      std::string& buf = st.prefixed[depth];
      buf.assign(1, ' ');
      buf.append(piece);
      piece = buf;
    }
    if (s.regex < 0) {
      run(depth + 1, piece);
      return;
    }
    if (s.behavior == SplitBehavior::Isolated && !s.invert) {  // the common case, streamed
      size_t at = 0, ms, me;
      while (at < piece.size() && next_match(s.regex, piece, at, ms, me)) {
        if (ms > at) run(depth + 1, piece.substr(at, ms - at));
        run(depth + 1, piece.substr(ms, me - ms));
        at = me;
      }
      if (at < piece.size()) run(depth + 1, piece.substr(at));
      return;
    }
    // General case: matches and gaps, then the behavior (as in HF's NormalizedString::split).
    auto& sp = st.spans[depth];
    sp.clear();
    size_t at = 0, ms, me;
    while (at < piece.size() && next_match(s.regex, piece, at, ms, me)) {
      if (ms > at) sp.push_back({at, ms, s.invert});
      sp.push_back({ms, me, !s.invert});
      at = me;
    }
    if (at < piece.size()) sp.push_back({at, piece.size(), s.invert});
    std::vector<TokenizerEncoder::State::Span> res;
    res.reserve(sp.size());
    switch (s.behavior) {
      case SplitBehavior::Removed:
        for (auto& x : sp)
          if (!x.match) res.push_back(x);
        break;
      case SplitBehavior::Isolated:
        res = sp;
        break;
      case SplitBehavior::MergedWithPrevious: {
        bool prev_match = false;
        for (auto& x : sp) {
          if (x.match && !prev_match && !res.empty())
            res.back().end = x.end;
          else
            res.push_back(x);
          prev_match = x.match;
        }
        break;
      }
      case SplitBehavior::MergedWithNext: {
        bool prev_match = false;
        for (size_t k = sp.size(); k-- > 0;) {
          const auto& x = sp[k];
          if (x.match && !prev_match && !res.empty())
            res.back().start = x.start;
          else
            res.push_back(x);
          prev_match = x.match;
        }
        std::reverse(res.begin(), res.end());
        break;
      }
      case SplitBehavior::Contiguous: {
        bool prev_match = false;
        for (auto& x : sp) {
          if (x.match == prev_match && !res.empty())
            res.back().end = x.end;
          else
            res.push_back(x);
          prev_match = x.match;
        }
        break;
      }
    }
    for (auto& x : res) run(depth + 1, piece.substr(x.start, x.end - x.start));
  }

  void segment(std::string_view seg) {
    if (seg.empty()) return;
    int which = 0;
    for (NormalForm f : t.normalizers) {
      if (unicode_quick_stable(seg, f)) continue;
      st.norm[which] = unicode_normalize(seg, f);
      seg = st.norm[which];
      which ^= 1;
    }
    run(0, seg);
  }

  bool is_word_char(std::string_view s, size_t i) const {  // for single_word: letters, digits, '_'
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) return std::isalnum(c) || c == '_';
    size_t j = i;
    return !is_white_space(utf8_next(s, j));
  }

  // Step 1: added tokens, then the segments between them.
  void text(std::string_view s, std::vector<int32_t>* ids) {
    if (t.added.empty()) {
      segment(s);
      return;
    }
    size_t seg_start = 0, i = 0;
    while (i < s.size()) {
      if (!t.first_byte[static_cast<unsigned char>(s[i])]) {
        i++;
        continue;
      }
      // Longest added token starting at i.
      int32_t node = 0, best = -1;
      size_t best_len = 0;
      for (size_t k = i; k < s.size(); k++) {
        const auto& next = t.trie[size_t(node)].next;
        const unsigned char c = static_cast<unsigned char>(s[k]);
        auto pos = std::lower_bound(next.begin(), next.end(), std::make_pair(c, int32_t(-1)));
        if (pos == next.end() || pos->first != c) break;
        node = pos->second;
        if (t.trie[size_t(node)].token >= 0) {
          best = t.trie[size_t(node)].token;
          best_len = k + 1 - i;
        }
      }
      if (best < 0) {
        i++;
        continue;
      }
      const AddedToken& a = t.added[size_t(best)];
      size_t start = i, end = i + best_len;
      if (a.single_word &&
          ((start > 0 && is_word_char(s, prev_char(s, start))) || (end < s.size() && is_word_char(s, end)))) {
        i++;
        continue;
      }
      if (a.lstrip)
        while (start > seg_start) {
          const size_t p = prev_char(s, start);
          size_t q = p;
          if (!is_white_space(utf8_next(s, q))) break;
          start = p;
        }
      if (a.rstrip)
        while (end < s.size()) {
          size_t q = end;
          if (!is_white_space(utf8_next(s, q))) break;
          end = q;
        }
      segment(s.substr(seg_start, start - seg_start));
      if (ids) ids->push_back(a.id);
      seg_start = i = end;
    }
    segment(s.substr(seg_start));
  }

  static size_t prev_char(std::string_view s, size_t i) {
    do i--;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
    return i;
  }
};

// Step 4 for BPE: the ids of one word, through the cache.
struct BpeSink {
  const TokenizerImpl& t;
  TokenizerEncoder::State& st;
  static void call(void* self, std::string_view w) { static_cast<BpeSink*>(self)->word(w); }
  void word(std::string_view w) {
    std::vector<int32_t>& out = *st.out;
    if (w.size() == 1) {
      out.push_back(byte_token(t, static_cast<unsigned char>(w[0])));
      return;
    }
    const bool cacheable = w.size() <= kCacheMaxWordBytes;
    if (cacheable) {
      auto it = st.cache.find(w);
      if (it != st.cache.end()) {
        const size_t off = size_t(it->second >> 32), cnt = size_t(uint32_t(it->second));
        out.insert(out.end(), st.cache_ids.begin() + ptrdiff_t(off), st.cache_ids.begin() + ptrdiff_t(off + cnt));
        return;
      }
    }
    const size_t before = out.size();
    bool done = false;
    if (t.ignore_merges) {
      auto it = t.bytes_ids.find(w);
      if (it != t.bytes_ids.end()) {
        out.push_back(it->second);
        done = true;
      }
    }
    if (!done) bpe_merge_word(t, w, out);
    if (cacheable) {
      if (st.cache.size() >= kCacheMaxEntries) {
        st.cache.clear();
        st.cache_ids.clear();
      }
      const size_t off = st.cache_ids.size(), cnt = out.size() - before;
      st.cache_ids.insert(st.cache_ids.end(), out.begin() + ptrdiff_t(before), out.end());
      st.cache.emplace(std::string(w), (uint64_t(off) << 32) | cnt);
    }
  }
};

struct WordLevelSink {
  const TokenizerImpl& t;
  TokenizerEncoder::State& st;
  static void call(void* self, std::string_view w) { static_cast<WordLevelSink*>(self)->word(w); }
  void word(std::string_view w) {
    auto it = t.token_ids.find(w);
    if (it != t.token_ids.end()) {
      st.out->push_back(it->second);
    } else if (t.unk_id >= 0) {
      st.out->push_back(t.unk_id);
    } else {
      fail("[tokenizer] ", t.name, ": '", std::string(w.substr(0, 80)),
           "' is not in the WordLevel vocabulary and there is no unk_token");
    }
  }
};

}  // namespace

void TokenizerEncoder::encode(std::string_view text, std::vector<int32_t>& out) {
  utf8_check(text, "[tokenizer] input");
  st_->out = &out;
  if (impl_->model_type == "BPE") {
    BpeSink sink{*impl_, *st_};
    Pipeline{*impl_, *st_, &BpeSink::call, &sink}.text(text, &out);
  } else {
    WordLevelSink sink{*impl_, *st_};
    Pipeline{*impl_, *st_, &WordLevelSink::call, &sink}.text(text, &out);
  }
  st_->out = nullptr;
}

void TokenizerEncoder::pretokenize_fn(std::string_view text, void (*fn)(void*, std::string_view), void* ctx) {
  utf8_check(text, "[tokenizer] input");
  Pipeline{*impl_, *st_, fn, ctx}.text(text, nullptr);
}

}  // namespace aah
