// Token shards (train.bin, val.bin): a 1024-byte header, then the tokens, little-endian.
//   bytes 0-7  "AAHTOK01"        bytes 8-11  uint32 version = 1     bytes 12-15 uint32 bytes per token (2 or 4)
//   bytes 16-23 uint64 token count   bytes 24-27 uint32 vocab size   bytes 28-1023 zeros
// The reader checks all of it against the file size and checks every token id < vocab size.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/files.h"

namespace aah {

constexpr size_t kShardHeaderBytes = 1024;

struct TokenShard {
  std::string path;
  uint32_t vocab_size = 0;
  std::vector<int32_t> tokens;
};

// Reads and validates a whole shard; throws aah::Error naming the file, the field and the offset.
TokenShard shard_read(const std::string& path);
// Same for bytes already open or in memory (ByteSource::memory(bytes, name, "[shard]")).
TokenShard shard_read(const ByteSource& src);
// Writes atomically; 2 bytes per token when vocab_size <= 65536, else 4. Checks every id < vocab_size.
void shard_write(const std::string& path, const std::vector<int32_t>& tokens, uint32_t vocab_size);

}  // namespace aah
