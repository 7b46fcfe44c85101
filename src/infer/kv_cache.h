// A KV cache sized per head. In inference a head with window W needs only its last W keys and values, so each
// (layer, KV head) keeps a ring buffer as long as the largest window among the query heads that read it (and no
// longer than the positions the session will ever hold). Full-window heads keep everything; short heads keep W.
//
// L layers, Hkv key/value heads, D head dim.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace aah {

struct KVCache {
  int L = 0, Hkv = 0, D = 0;
  std::vector<int> capacity;     // (L, Hkv) ring length in positions
  std::vector<size_t> offset;    // (L, Hkv) start of the ring in k / v (floats)
  std::vector<float> k, v;       // all rings, one allocation each
  int length = 0;                // positions appended so far (the next position)

  // windows (L, H): the windows in force; max_positions: the most positions this cache will see.
  void init(int layers, int heads, int kv_heads, int head_dim, const int* windows, int max_positions);
  void clear() { length = 0; }
  size_t bytes() const { return (k.size() + v.size()) * sizeof(float); }
  // Key / value of position `pos` of (layer, kv head); pos must still be in the ring.
  float* key(int l, int hk, int pos) { return k.data() + offset[l * Hkv + hk] + size_t(pos % capacity[l * Hkv + hk]) * D; }
  float* value(int l, int hk, int pos) {
    return v.data() + offset[l * Hkv + hk] + size_t(pos % capacity[l * Hkv + hk]) * D;
  }
};

}  // namespace aah
