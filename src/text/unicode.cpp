#include "text/unicode.h"

#include <cstdlib>
#include <cstring>

#include "core/check.h"

// utf8proc is linked when CMake finds it with pkg-config (its Cflags define UTF8PROC_EXPORTS) or when the build
// says so with AAH_HAVE_UTF8PROC. Without it everything but non-trivial normalization works.
#if defined(AAH_HAVE_UTF8PROC) || defined(UTF8PROC_EXPORTS)
#include <utf8proc.h>
#define AAH_UTF8PROC 1
#else
#define AAH_UTF8PROC 0
#endif

namespace aah {

namespace {

// Length of the valid UTF-8 sequence at p (1-4), or 0 when invalid; then *prefix is the length of the maximal
// subpart (>= 1) that a replacement character stands for.
size_t utf8_seq(const unsigned char* p, size_t left, size_t* prefix) {
  const unsigned c = p[0];
  if (c < 0x80) return 1;
  size_t n;
  unsigned lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    *prefix = 1;
    return 0;
  }
  size_t k = 1;
  for (; k < n && k < left; k++) {
    const unsigned b = p[k];
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
  }
  if (k == n) return n;
  *prefix = k;
  return 0;
}

const char* utf8_problem(const unsigned char* p, size_t left) {
  const unsigned c = p[0];
  if (c >= 0x80 && c <= 0xBF) return "continuation byte without a lead byte";
  if (c == 0xC0 || c == 0xC1) return "overlong encoding";
  if (c >= 0xF5) return "byte never used in UTF-8";
  size_t prefix = 0;
  utf8_seq(p, left, &prefix);
  if (prefix >= left) return "truncated sequence at the end";
  const unsigned b = p[1];
  if (prefix == 1 && c == 0xE0 && b < 0xA0) return "overlong encoding";
  if (prefix == 1 && c == 0xF0 && b < 0x90) return "overlong encoding";
  if (prefix == 1 && c == 0xED && b >= 0xA0) return "surrogate code point";
  if (prefix == 1 && c == 0xF4 && b >= 0x90) return "code point past U+10FFFF";
  return "truncated sequence";
}

struct ByteLevelTables {
  uint32_t to_char[256];
  int16_t to_byte[324];  // code points 0..323 cover the whole alphabet
  ByteLevelTables() {
    for (auto& b : to_byte) b = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? uint32_t(b) : uint32_t(256 + n++);
      to_byte[to_char[b]] = int16_t(b);
    }
  }
};
const ByteLevelTables& byte_tables() {
  static const ByteLevelTables t;
  return t;
}

}  // namespace

size_t utf8_invalid_offset(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Skip ASCII 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      i++;
      continue;
    }
    size_t prefix = 0;
    const size_t len = utf8_seq(p + i, n - i, &prefix);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

void utf8_check(std::string_view s, std::string_view what) {
  const size_t at = utf8_invalid_offset(s);
  if (at == std::string_view::npos) return;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", unsigned(p[at]));
  fail(what, " is not valid UTF-8: byte ", hex, " at offset ", at, " (", utf8_problem(p + at, s.size() - at), ")");
}

std::string utf8_sanitize(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  std::string out;
  out.reserve(n);
  size_t i = 0;
  while (i < n) {
    size_t prefix = 0;
    const size_t len = utf8_seq(p + i, n - i, &prefix);
    if (len) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += prefix;
    }
  }
  return out;
}

uint32_t utf8_next(std::string_view s, size_t& i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const unsigned c = p[0];
  if (c < 0x80) {
    i += 1;
    return c;
  }
  if (c < 0xE0) {
    i += 2;
    return ((c & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (c < 0xF0) {
    i += 3;
    return ((c & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  i += 4;
  return ((c & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

bool unicode_have_normalizer() { return AAH_UTF8PROC; }

namespace {

// Normalizes one stretch with utf8proc (or fails without it).
void normalize_stretch(std::string& out, std::string_view s, NormalForm form) {
#if AAH_UTF8PROC
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::NFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::NFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::NFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          utf8proc_ssize_t(s.size()), &dst, utf8proc_option_t(options));
  if (n < 0) fail("[unicode] normalization failed: ", utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(dst), size_t(n));
  std::free(dst);
#else
  (void)out;
  (void)s;
  (void)form;
  fail(
      "[unicode] this build has no Unicode normalizer (utf8proc): install libutf8proc-dev (scripts/setup.sh) and "
      "rebuild");
#endif
}

}  // namespace

bool unicode_quick_stable(std::string_view s, NormalForm form) {
  const unsigned limit = form == NormalForm::NFC ? 0xCC : 0x80;
  for (unsigned char c : s)
    if (c >= limit) return false;
  return true;
}

std::string unicode_normalize(std::string_view s, NormalForm form) {
  utf8_check(s, "[unicode] text");
  // Bytes below `limit` start characters the form leaves alone and may be cut before: for NFC every code point
  // below U+0300 (lead bytes below 0xCC; continuation bytes are below 0xC0 too), for the others ASCII only.
  const unsigned limit = form == NormalForm::NFC ? 0xCC : 0x80;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  auto simple_start = [&](size_t i) { return p[i] < 0x80 || (p[i] >= 0xC0 && p[i] < limit); };
  size_t i = 0;
  while (i < n && p[i] < limit) i++;
  if (i == n) return std::string(s);
  std::string out;
  out.reserve(n + n / 8);
  size_t copied = 0;  // s[0, copied) is in `out`
  while (i < n) {
    // p[i] is a byte at or above `limit`: the lead byte of a character that needs work. The stretch starts at the
    // character before it (a starter it may compose with) and ends before the next simple character.
    size_t start = i;
    if (start > copied) {
      start--;
      while (start > copied && (p[start] & 0xC0) == 0x80) start--;
    }
    size_t end = i + 1;
    while (end < n && !((p[end] & 0xC0) != 0x80 && simple_start(end))) end++;
    out.append(s.data() + copied, start - copied);
    normalize_stretch(out, s.substr(start, end - start), form);
    copied = end;
    i = end;
    while (i < n && p[i] < limit) i++;
  }
  out.append(s.data() + copied, n - copied);
  return out;
}

uint32_t byte_level_char(uint8_t b) { return byte_tables().to_char[b]; }

int byte_level_byte(uint32_t cp) { return cp < 324 ? byte_tables().to_byte[cp] : -1; }

bool byte_level_decode(std::string_view token, std::string& out) {
  const size_t before = out.size();
  size_t i = 0;
  while (i < token.size()) {
    size_t prefix = 0;
    if (!utf8_seq(reinterpret_cast<const unsigned char*>(token.data()) + i, token.size() - i, &prefix)) {
      out.resize(before);
      return false;
    }
    const int b = byte_level_byte(utf8_next(token, i));
    if (b < 0) {
      out.resize(before);
      return false;
    }
    out += char(b);
  }
  return true;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8_append(out, byte_level_char(b));
  return out;
}

}  // namespace aah
