// One-allocation arenas. Training allocates every buffer once, before the first step: on this kind of VM the
// first touch of fresh memory costs about 2 s per GiB, so allocating per step would be ruinous.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "core/check.h"

namespace aah {

// `bytes` zeroed bytes, 64-byte aligned and rounded up to whole cache lines; out of memory is an error that names
// `what` (Buffer's storage, and the CPU backends' Memory::alloc).
inline void* aligned_zeroed(size_t bytes, const char* what) {
  void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
  if (!p) fail("[", what, "] out of memory allocating ", bytes >> 20, " MiB");
  std::memset(p, 0, bytes);
  return p;
}

// Owning 64-byte aligned, zeroed buffer (no copies).
template <class T>
struct Buffer {
  T* data = nullptr;
  size_t size = 0;
  Buffer() = default;
  explicit Buffer(size_t n) { resize(n); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : data(o.data), size(o.size) { o.data = nullptr, o.size = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(data, o.data);
    std::swap(size, o.size);
    return *this;
  }
  ~Buffer() { std::free(data); }
  // Drops the contents; the new n values are zero.
  void resize(size_t n) {
    std::free(data);
    data = nullptr, size = 0;
    data = static_cast<T*>(aligned_zeroed(n * sizeof(T), "buffer"));
    size = n;
  }
  T& operator[](size_t i) { return data[i]; }
  const T& operator[](size_t i) const { return data[i]; }
};

// Collects (pointer slot, count) requests, then makes one 64-byte aligned, zeroed allocation and points every
// slot into it. Usage: plan.add(&p.wq, n); ...; Buffer<float> arena = plan.allocate();
template <class T>
class ArenaPlan {
 public:
  void add(T** slot, size_t count) { items_.push_back({slot, count}); }
  size_t total() const {
    size_t n = 0;
    for (auto& it : items_) n += round_up(it.count);
    return n;
  }
  // Returns the allocation that owns every slot's memory.
  Buffer<T> allocate() {
    Buffer<T> base(total());
    place(base.data);
    return base;
  }
  // Points every slot into base, an allocation of at least total() values (64-byte aligned).
  void place(T* base) {
    size_t off = 0;
    for (auto& it : items_) {
      *it.slot = base + off;
      off += round_up(it.count);
    }
  }

 private:
  static size_t round_up(size_t count) {
    const size_t per_line = 64 / sizeof(T) > 0 ? 64 / sizeof(T) : 1;
    return (count + per_line - 1) / per_line * per_line;
  }
  struct Item {
    T** slot;
    size_t count;
  };
  std::vector<Item> items_;
};

}  // namespace aah
