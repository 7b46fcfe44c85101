// AAH-v3 per-head base features (spec section 2): 9 numbers per head, computed at a control update.
//
// B batch, T positions, H query heads, Hkv key/value heads (H % Hkv == 0), D head dim.
#pragma once

namespace aah {

// Number of base features per head (spec section 2).
constexpr int kControllerFeatures = 9;

// Fills out (H, 9), row h:
//   0 mean |q|, 1 std q, 2 mean |k|, 3 std k, 4 mean |v|, 5 std v   (over batch, positions and the head's D dims)
//   6 entropy[h], 7 out_norm[h], 8 usage[h]                         (previous update's diagnostics; 0 if nullptr)
// std is the unbiased standard deviation over the B*T*D elements (0 when there is only one element). A query head
// h reads KV head h / (H / Hkv), so its k/v features are that KV head's. q, k, v are the tensors attention really
// uses (after q/k norm and RoPE). Everything is accumulated in double; threads split the heads.
void controller_head_features(double* out,       // (H, 9)
                              const float* q,    // (B, H, T, D)
                              const float* k,    // (B, Hkv, T, D)
                              const float* v,    // (B, Hkv, T, D)
                              int B, int H, int Hkv, int T, int D,
                              const double* entropy,   // (H) or nullptr
                              const double* out_norm,  // (H) or nullptr
                              const double* usage);    // (H) or nullptr

// The same features from a batch split over several processes (data-parallel training), exactly as if one process
// held the whole batch. Each part computes its moments: per head, q heads then k heads then v heads
// ((H + 2 Hkv), 4): count n, mean, M2 (sum of squared deviations from the mean), sum |x|.
constexpr int kMomentStats = 4;
void controller_head_moments(double* mom, const float* q, const float* k, const float* v, int B, int H, int Hkv, int T,
                             int D);
// Combines `parts` moment tables ((parts, heads, 4), in part order, Chan et al.) into one (heads, 4).
void controller_moments_combine(double* out, const double* parts, int nparts, int heads);
// Features (H, 9) from a moment table, with diagnostics as in controller_head_features.
void controller_features_from_moments(double* out, const double* mom, int H, int Hkv, const double* entropy,
                                      const double* out_norm, const double* usage);

}  // namespace aah
