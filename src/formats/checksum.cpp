#include "formats/checksum.h"

#include <nettle/sha2.h>

#include <array>
#include <cstdio>
#include <cstring>

namespace aah {

namespace {

// table[k][b]: the CRC of byte b followed by k zero bytes (reflected polynomial 0x82F63B78).
constexpr std::array<std::array<uint32_t, 256>, 8> make_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t c = b;
    for (int i = 0; i < 8; i++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    t[0][b] = c;
  }
  for (int k = 1; k < 8; k++)
    for (uint32_t b = 0; b < 256; b++) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  return t;
}

constexpr auto kTables = make_tables();

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto& t = kTables;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo, hi;  // little-endian host (as the safetensors code assumes)
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
        t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; n > 0; p++, n--) c = (c >> 8) ^ t[0][(c ^ *p) & 0xff];
  return ~c;
}

std::string checksum_str(uint32_t crc) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "crc32c:%08x", crc);
  return buf;
}

std::array<uint8_t, 32> sha256(std::initializer_list<std::string_view> parts) {
  static_assert(SHA256_DIGEST_SIZE == 32);
  sha256_ctx ctx;
  sha256_init(&ctx);
  for (std::string_view p : parts) sha256_update(&ctx, p.size(), reinterpret_cast<const uint8_t*>(p.data()));
  std::array<uint8_t, 32> d;
  sha256_digest(&ctx, d.size(), d.data());
  return d;
}

std::string sha256_hex(std::string_view data) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint8_t c : sha256({data})) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

}  // namespace aah
