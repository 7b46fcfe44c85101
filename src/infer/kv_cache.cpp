#include "infer/kv_cache.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/bf16/bf16.h"

namespace aah {

void KVCache::init(const Memory& m, int layers, int heads, int kv_heads, int head_dim, const int* windows,
                   int max_positions, bool in_bf16) {
  AAH_CHECK(layers > 0 && kv_heads > 0 && heads % kv_heads == 0 && max_positions > 0);
  AAH_CHECK(!in_bf16 || m.host, "a bf16 KV cache is rounded on the host");
  memory = &m;
  L = layers, Hkv = kv_heads, D = head_dim;
  const int group = heads / kv_heads;
  capacity.assign(size_t(L) * Hkv, 1);
  offset.assign(size_t(L) * Hkv, 0);
  size_t total = 0;
  for (int l = 0; l < L; l++)
    for (int hk = 0; hk < Hkv; hk++) {
      int longest = 1;
      for (int g = 0; g < group; g++) longest = std::max(longest, windows[l * heads + hk * group + g]);
      capacity[l * Hkv + hk] = std::min(longest, max_positions);
      offset[l * Hkv + hk] = total;
      total += size_t(capacity[l * Hkv + hk]) * D;
    }
  bf16 = in_bf16;
  k = DeviceBuffer<float>(m, bf16 ? 0 : total);  // zeroed
  v = DeviceBuffer<float>(m, bf16 ? 0 : total);
  k16 = DeviceBuffer<uint16_t>(m, bf16 ? total : 0);
  v16 = DeviceBuffer<uint16_t>(m, bf16 ? total : 0);
  length = 0;
}

void KVCache::store(int l, int hk, int pos, const float* key, const float* value, bool from_host) {
  const size_t at = offset[l * Hkv + hk] + size_t(pos % capacity[l * Hkv + hk]) * D;
  if (bf16) {  // host memory (init)
    bf16::convert(k16.data + at, key, D);
    bf16::convert(v16.data + at, value, D);
  } else {
    const auto put = from_host ? memory->upload : memory->copy;
    put(k.data + at, key, D * sizeof(float));
    put(v.data + at, value, D * sizeof(float));
  }
}

}  // namespace aah
