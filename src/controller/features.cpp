// AAH-v3 per-head base features (spec section 2). See features.h.
#include "controller/features.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include "core/check.h"

namespace aah {

namespace {

// Moments of the B*T*D elements of head `h` of a (B, NH, T, D) tensor, one pass: m = {n, mean, M2, sum |x|}.
// The sums are taken around a shift (the head's first element) so that a large common offset does not cancel
// the variance away; the shift does not change the variance.
void head_moments(const float* x, int B, int NH, int h, int T, int D, double* m) {
  const size_t per_b = size_t(T) * D;
  const size_t n = size_t(B) * per_b;
  if (n == 0) {
    m[0] = m[1] = m[2] = m[3] = 0;
    return;
  }
  const double shift = x[size_t(h) * per_b];
  double s_abs = 0, s1 = 0, s2 = 0;
  for (int b = 0; b < B; b++) {
    const float* p = x + (size_t(b) * NH + h) * per_b;
    double a_abs = 0, a1 = 0, a2 = 0;  // per-row partial sums (keeps the accumulators short)
    for (size_t i = 0; i < per_b; i++) {
      const double xi = p[i];
      const double d = xi - shift;
      a_abs += std::fabs(xi);
      a1 += d;
      a2 += d * d;
    }
    s_abs += a_abs, s1 += a1, s2 += a2;
  }
  m[0] = double(n);
  m[1] = shift + s1 / double(n);
  m[2] = s2 - s1 * s1 / double(n);
  m[3] = s_abs;
}

// mean |x| and unbiased std (0 with fewer than two elements) from moments.
void stats_of(const double* m, double* mean_abs, double* std) {
  const double n = m[0];
  *mean_abs = n > 0 ? m[3] / n : 0.0;
  if (n < 2) {
    *std = 0;
    return;
  }
  const double var = m[2] / (n - 1);
  *std = var > 0 ? std::sqrt(var) : 0.0;
}

}  // namespace

void controller_head_moments(double* mom, const float* q, const float* k, const float* v, int B, int H, int Hkv, int T,
                             int D) {
  AAH_CHECK(H > 0 && Hkv > 0 && H % Hkv == 0, "[controller] features: H ", H, " Hkv ", Hkv);
#pragma omp parallel for schedule(static)
  for (int j = 0; j < 2 * Hkv + H; j++) {
    double* m = mom + size_t(j) * kMomentStats;
    if (j < H)
      head_moments(q, B, H, j, T, D, m);
    else if (j < H + Hkv)
      head_moments(k, B, Hkv, j - H, T, D, m);
    else
      head_moments(v, B, Hkv, j - H - Hkv, T, D, m);
  }
}

void controller_moments_combine(double* out, const double* parts, int nparts, int heads) {
  for (int j = 0; j < heads; j++) {
    double n = 0, sum = 0, s_abs = 0;
    for (int p = 0; p < nparts; p++) {
      const double* m = parts + (size_t(p) * heads + j) * kMomentStats;
      n += m[0], sum += m[0] * m[1], s_abs += m[3];
    }
    const double mean = n > 0 ? sum / n : 0.0;
    double m2 = 0;
    for (int p = 0; p < nparts; p++) {
      const double* m = parts + (size_t(p) * heads + j) * kMomentStats;
      const double d = m[1] - mean;
      m2 += m[2] + m[0] * d * d;
    }
    double* o = out + size_t(j) * kMomentStats;
    o[0] = n, o[1] = mean, o[2] = m2, o[3] = s_abs;
  }
}

void controller_features_from_moments(double* out, const double* mom, int H, int Hkv, const double* entropy,
                                      const double* out_norm, const double* usage) {
  AAH_CHECK(H > 0 && Hkv > 0 && H % Hkv == 0, "[controller] features: H ", H, " Hkv ", Hkv);
  const int group = H / Hkv;
  for (int h = 0; h < H; h++) {
    double* o = out + size_t(h) * kControllerFeatures;
    const int g = h / group;
    stats_of(mom + size_t(h) * kMomentStats, &o[0], &o[1]);
    stats_of(mom + size_t(H + g) * kMomentStats, &o[2], &o[3]);
    stats_of(mom + size_t(H + Hkv + g) * kMomentStats, &o[4], &o[5]);
    o[6] = entropy ? entropy[h] : 0.0;
    o[7] = out_norm ? out_norm[h] : 0.0;
    o[8] = usage ? usage[h] : 0.0;
  }
}

void controller_head_features(double* out, const float* q, const float* k, const float* v, int B, int H, int Hkv,
                              int T, int D, const double* entropy, const double* out_norm, const double* usage) {
  std::vector<double> mom(size_t(H + 2 * Hkv) * kMomentStats);
  controller_head_moments(mom.data(), q, k, v, B, H, Hkv, T, D);
  controller_features_from_moments(out, mom.data(), H, Hkv, entropy, out_norm, usage);
}

}  // namespace aah
