// Checksums.
// CRC-32C (Castagnoli; the checksum of iSCSI and ext4), used to detect corrupt checkpoint files: it catches every
// burst error up to 32 bits and any few-bit error. Table-driven, 8 bytes per step ("slicing by 8"), about 1-2 GB/s.
// SHA-256 (FIPS 180-4, computed by nettle), the content digest: corpus files and their train/validation split
// (data/corpus.h), and the golden test's digests.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace aah {

// CRC-32C of data[0, n), continuing from `crc`, the CRC-32C of the bytes before (0 to start):
// crc32c(b, crc32c(a)) == crc32c(a + b). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// "crc32c:e3069283", the form stored in safetensors metadata under kChecksumKey.
std::string checksum_str(uint32_t crc);
inline constexpr const char* kChecksumKey = "aah.checksum";

// SHA-256 of the concatenation of `parts`.
std::array<uint8_t, 32> sha256(std::initializer_list<std::string_view> parts);
// SHA-256 as 64 lowercase hex digits. sha256_hex("abc") == "ba7816bf...f20015ad".
std::string sha256_hex(std::string_view data);

}  // namespace aah
