// The pre-tokenizer regexes: HF tokenizer.json (Oniguruma) patterns translated to PCRE2 and compiled (Regex in
// text/tokenizer_impl.h), and the GPT-2 and Qwen patterns in tokenizer.json syntax.
#include "text/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>

#include "core/check.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace aah {

const char* const kQwenPretokenizeRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt2PretokenizeRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

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

}  // namespace aah
