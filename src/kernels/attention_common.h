// Types shared by every attention implementation (reference, fast, dense, KV cache).
#pragma once
#include <cstdint>

namespace aah {

// The one visibility predicate: key k_pos is visible to query q_pos under a causal window of `window` tokens.
// Every mask, kernel and cache uses it.
inline bool attn_visible(int q_pos, int k_pos, int window) { return k_pos <= q_pos && q_pos - k_pos < window; }

// Number of visible (query, key) pairs of one head over T positions: sum over t < T of min(t + 1, window).
inline uint64_t attn_visible_pairs(int T, int window) {
  const uint64_t t = T > 0 ? uint64_t(T) : 0, w = window < 1 ? 1 : uint64_t(window);
  if (w >= t) return t * (t + 1) / 2;
  return w * (w + 1) / 2 + (t - w) * w;
}

// Work counters of the attention kernels, accumulated (+=) by every call.
struct AttnCounters {
  uint64_t fwd_pairs = 0;           // (query, key) pairs visible under the windows, forward
  uint64_t fwd_pairs_computed = 0;  // score elements actually computed (whole tiles), forward
  uint64_t fwd_tiles_visited = 0, fwd_tiles_skipped = 0;
  uint64_t bwd_pairs = 0, bwd_pairs_computed = 0;
  uint64_t bwd_tiles_visited = 0, bwd_tiles_skipped = 0;
  uint64_t macs = 0;  // multiply-adds executed in QK^T, PV and their gradients (forward and backward)
};

// Per-head attention diagnostics (spec section 2, features 6-8), each an array of H values, means over (B, T):
// entropy of the attention row (natural log), L2 norm of the head output row, and usage = sum_j p_ij (i - j)
// divided by (W_h - 1) (0 when W_h = 1). Pass nullptr to skip them (they are only needed on control updates).
struct AttnDiagnostics {
  double* entropy = nullptr;
  double* out_norm = nullptr;
  double* usage = nullptr;
};

namespace cpu {
// How attn_local_backward splits its work over threads. Every schedule gives bitwise identical results (same
// per-element operation order), so the choice only affects speed; tests force each one.
//   per_head: one pass, a task per (batch, kv head) computes dQ, dK and dV of its heads (5 tile products per
//             tile pair, but only B * Hkv tasks).
//   per_tile: two passes, dK/dV over (batch, kv head, key tile) tasks, then dQ over (batch, head, query tile)
//             tasks (7 tile products per tile pair, fine-grained).
//   automatic: per_head when its estimated makespan on the current thread count beats per_tile.
enum class AttnBackwardSchedule { automatic, per_head, per_tile };
void attn_local_set_backward_schedule(AttnBackwardSchedule schedule);
// Interior tiles fuse the softmax passes that read each score once into the score products' epilogues (the
// default where the build has AVX2). Both settings give bitwise identical results; tests compare them.
void attn_local_set_fused_epilogues(bool on);
// Tests: fill the score tiles with NaN before every tile pair, so that a product reading an entry that nothing
// wrote for this pair (a stale one) turns its result into NaN. Off by default.
void attn_local_set_poison_scratch(bool on);
}  // namespace cpu

}  // namespace aah
