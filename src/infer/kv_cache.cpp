#include "infer/kv_cache.h"

#include <algorithm>

#include "core/check.h"

namespace aah {

void KVCache::init(int layers, int heads, int kv_heads, int head_dim, const int* windows, int max_positions) {
  AAH_CHECK(layers > 0 && kv_heads > 0 && heads % kv_heads == 0 && max_positions > 0);
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
  k.assign(total, 0.0f);
  v.assign(total, 0.0f);
  length = 0;
}

}  // namespace aah
