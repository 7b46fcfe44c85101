// A KV cache sized per head. In inference a head with window W needs only its last W keys and values, so each
// (layer, KV head) keeps a ring buffer as long as the largest window among the query heads that read it (and no
// longer than the positions the session will ever hold). Full-window heads keep everything; short heads keep W.
// The rings hold fp32, or bf16 (half the bytes) when the backend runs in bf16. They live in the backend's memory
// (kernels/backend.h: Memory); bf16 rings are host memory (rounded on the host).
//
// L layers, Hkv key/value heads, D head dim.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace aah {

struct KVCache {
  int L = 0, Hkv = 0, D = 0;
  std::vector<int> capacity;     // (L, Hkv) ring length in positions
  std::vector<size_t> offset;    // (L, Hkv) start of the ring in k / v (values)
  bool bf16 = false;             // the rings are k16 / v16, else k / v
  const Memory* memory = nullptr;   // where the rings are
  DeviceBuffer<float> k, v;         // all rings, one allocation each (fp32)
  DeviceBuffer<uint16_t> k16, v16;  // the same in bf16
  int length = 0;                // positions appended so far (the next position)

  // windows (L, H): the windows in force; max_positions: the most positions this cache will see.
  void init(const Memory& m, int layers, int heads, int kv_heads, int head_dim, const int* windows, int max_positions,
            bool in_bf16 = false);
  void clear() { length = 0; }
  size_t bytes() const { return (k.size + v.size) * sizeof(float) + (k16.size + v16.size) * 2; }
  // Stores key and value (D each) of position `pos` of (layer, kv head), rounded to bf16 in a bf16 cache; they are
  // in the same memory as the rings, or on the host (from_host).
  void store(int l, int hk, int pos, const float* key, const float* value, bool from_host);
};

}  // namespace aah
