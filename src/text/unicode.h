// UTF-8 and Unicode helpers for the tokenizers: strict UTF-8 validation, code point decoding, NFC/NFD/NFKC/NFKD
// normalization (utf8proc) and the GPT-2 byte-level alphabet (each of the 256 bytes <-> one printable code point).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace aah {

// Offset of the first byte that is not part of valid UTF-8 (overlong forms, surrogates and code points past
// U+10FFFF are invalid), or npos when all of `s` is valid.
size_t utf8_invalid_offset(std::string_view s);
// Throws aah::Error "WHAT is not valid UTF-8: byte 0xC3 at offset 17 (truncated sequence)" unless `s` is valid;
// `what` names the text, e.g. "[tokenizer] input".
void utf8_check(std::string_view s, std::string_view what);
// Replaces each maximal invalid subsequence by U+FFFD (the WHATWG / Unicode "substitution of maximal subparts").
std::string utf8_sanitize(std::string_view s);
// Decodes the code point at s[i] (s must be valid UTF-8); advances i.
uint32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, uint32_t cp);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
// Normalizes valid UTF-8 (throws aah::Error on invalid input). Only the stretches around characters that a form can
// change are handed to utf8proc: code points below U+0300 are stable under NFC, ASCII under every form, and text
// may be cut before any such character without changing the result. Without utf8proc in the build, text that needs
// real work throws aah::Error.
std::string unicode_normalize(std::string_view s, NormalForm form);
inline std::string nfc(std::string_view s) { return unicode_normalize(s, NormalForm::NFC); }
// True when `s` is certainly unchanged by `form` (every byte starts or continues a character the form leaves
// alone); a cheap scan, no allocation. False means unicode_normalize() must look.
bool unicode_quick_stable(std::string_view s, NormalForm form);
// True when unicode_normalize works on any text (the build links utf8proc).
bool unicode_have_normalizer();

// GPT-2's bytes_to_unicode: printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map to themselves, the other 68
// to U+0100, U+0101, ... in byte order. So byte 0x20 (space) is U+0120 'Ġ' and 0x0A is U+010A 'Ċ'.
uint32_t byte_level_char(uint8_t b);
// Inverse: the byte for a code point of the byte-level alphabet, or -1.
int byte_level_byte(uint32_t cp);
// A token string in the byte-level alphabet -> its bytes; false (out untouched) when a character is not in it.
bool byte_level_decode(std::string_view token, std::string& out);
// Bytes -> byte-level token string (UTF-8).
std::string byte_level_encode(std::string_view bytes);

}  // namespace aah
