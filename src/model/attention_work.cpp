#include "model/attention_work.h"

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace aah {

uint64_t full_window_attention_macs(const ModelConfig& m, int T, const Backend<float>& backend, bool backward) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int, const Backend<float>*, bool>, uint64_t> cache;
  const int H = m.num_attention_heads, Hkv = m.num_key_value_heads, D = m.head_dim;
  const auto key = std::make_tuple(H, Hkv, D, T, &backend, backward);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const size_t nq = size_t(H) * T * D, nk = size_t(Hkv) * T * D;
  std::vector<float> q(nq), o(nq), dout(nq), dq(nq), lse(size_t(H) * T), k(nk), v(nk), dk(nk), dv(nk);
  std::vector<int> windows(H, T);
  AttnCounters c;
  backend.attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), windows.data(), 1, H, Hkv, T, D,
                            nullptr, &c);
  if (backward)
    backend.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), o.data(), lse.data(), q.data(), k.data(),
                               v.data(), windows.data(), 1, H, Hkv, T, D, &c);
  return cache[key] = c.macs;
}

}  // namespace aah
