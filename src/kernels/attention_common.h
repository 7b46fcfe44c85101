// Types shared by every attention implementation (reference, fast, dense, KV cache).
#pragma once
#include <cstdint>

namespace aah {

// The one visibility predicate: key k_pos is visible to query q_pos under a causal window of `window` tokens.
// Every mask, kernel and cache uses it.
inline bool attn_visible(int q_pos, int k_pos, int window) { return k_pos <= q_pos && q_pos - k_pos < window; }

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

}  // namespace aah
