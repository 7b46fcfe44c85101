// libFuzzer target: a token shard (AAHTOK01: 1024-byte header, then 2- or 4-byte token ids).
#include <cstdio>
#include <cstdlib>

#include "fuzz_common.h"
#include "data/shard.h"

using namespace aah;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::accepts([&] {
    const TokenShard s = shard_read(ByteSource::memory(fuzz::bytes_of(data, size), "fuzz.bin", "[shard]"));
    AAH_FUZZ_ASSERT(s.vocab_size > 0);
    for (int32_t id : s.tokens) AAH_FUZZ_ASSERT(id >= 0 && uint32_t(id) < s.vocab_size);
  });
  return 0;
}
