#include "data/shard.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/check.h"
#include "core/files.h"

namespace aah {

// Header fields and tokens are copied with memcpy: the format is little-endian, and so must the host be.
static_assert(std::endian::native == std::endian::little, "token shard I/O assumes a little-endian host");

namespace {

constexpr char kMagic[8] = {'A', 'A', 'H', 'T', 'O', 'K', '0', '1'};
constexpr uint32_t kVersion = 1;

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void store(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace

TokenShard shard_read(const std::string& path) { return shard_read(ByteSource::file(path, "[shard]")); }

TokenShard shard_read(const ByteSource& src) {
  const std::string& path = src.name();
  auto bad = [&](const auto&... what) { fail("[shard] ", path, ": ", what...); };
  const uint64_t file_size = src.size();
  if (file_size < kShardHeaderBytes)
    bad("file is ", file_size, " bytes, shorter than the ", kShardHeaderBytes, "-byte header");

  unsigned char h[kShardHeaderBytes];
  src.read(h, sizeof h, 0);
  if (std::memcmp(h, kMagic, 8) != 0) bad("bad magic (bytes 0-7), expected \"AAHTOK01\": not a token shard");
  const uint32_t version = load<uint32_t>(h + 8);
  const uint32_t bytes_per_token = load<uint32_t>(h + 12);
  const uint64_t count = load<uint64_t>(h + 16);
  const uint32_t vocab_size = load<uint32_t>(h + 24);
  if (version != kVersion) bad("version (bytes 8-11) is ", version, ", expected ", kVersion);
  if (bytes_per_token != 2 && bytes_per_token != 4)
    bad("bytes per token (bytes 12-15) is ", bytes_per_token, ", expected 2 or 4");
  if (vocab_size == 0) bad("vocab size (bytes 24-27) is 0");
  if (vocab_size > uint32_t(INT32_MAX)) bad("vocab size (bytes 24-27) is ", vocab_size, ", more than 2^31 - 1");
  for (size_t i = 28; i < kShardHeaderBytes; i++)
    if (h[i] != 0) bad("reserved header byte ", i, " is ", int(h[i]), ", expected 0");

  const uint64_t data_bytes = file_size - kShardHeaderBytes;
  uint64_t need = 0;
  if (__builtin_mul_overflow(count, uint64_t(bytes_per_token), &need) || need > data_bytes)
    bad("truncated: header says ", count, " tokens of ", bytes_per_token, " bytes, but the file has only ", data_bytes,
        " bytes of tokens (", data_bytes / bytes_per_token, " tokens)");
  if (need < data_bytes)
    bad(data_bytes - need, " trailing bytes after the ", count, " tokens the header announces");

  TokenShard shard;
  shard.path = path;
  shard.vocab_size = vocab_size;
  shard.tokens.resize(count);
  // Read in chunks, widening 2-byte tokens and checking each id.
  const size_t chunk = size_t(1) << 20;
  std::vector<unsigned char> buf(std::min<uint64_t>(count, chunk) * bytes_per_token);
  for (size_t i = 0; i < count; i += chunk) {
    size_t m = std::min<uint64_t>(chunk, count - i);
    src.read(buf.data(), m * bytes_per_token, kShardHeaderBytes + i * bytes_per_token);
    for (size_t k = 0; k < m; k++) {
      uint32_t id = bytes_per_token == 2 ? load<uint16_t>(&buf[k * 2]) : load<uint32_t>(&buf[k * 4]);
      if (id >= vocab_size)
        bad("token ", i + k, " (byte offset ", kShardHeaderBytes + (i + k) * bytes_per_token, ") is ", id,
            ", not below vocab size ", vocab_size);
      shard.tokens[i + k] = int32_t(id);
    }
  }
  return shard;
}

void shard_write(const std::string& path, const std::vector<int32_t>& tokens, uint32_t vocab_size) {
  if (vocab_size == 0 || vocab_size > uint32_t(INT32_MAX))
    fail("[shard] ", path, ": vocab size ", vocab_size, " is not in [1, 2^31 - 1]");
  for (size_t i = 0; i < tokens.size(); i++)
    if (tokens[i] < 0 || uint32_t(tokens[i]) >= vocab_size)
      fail("[shard] ", path, ": token ", i, " is ", tokens[i], ", not in [0, ", vocab_size, ")");

  const uint32_t bytes_per_token = vocab_size <= 65536 ? 2 : 4;
  unsigned char h[kShardHeaderBytes] = {};
  std::memcpy(h, kMagic, 8);
  store<uint32_t>(h + 8, kVersion);
  store<uint32_t>(h + 12, bytes_per_token);
  store<uint64_t>(h + 16, tokens.size());
  store<uint32_t>(h + 24, vocab_size);

  std::vector<uint16_t> narrow;
  ByteSpan body{tokens.data(), tokens.size() * 4};  // ids are non-negative, so int32 bytes == uint32 bytes
  if (bytes_per_token == 2) {
    narrow.assign(tokens.begin(), tokens.end());
    body = {narrow.data(), narrow.size() * 2};
  }
  write_file_atomic_parts(path, {{h, sizeof h}, body});
}

}  // namespace aah
