// AAH-v3 per-head base features (spec section 2). See features.h.
#include "controller/features.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include "core/check.h"

namespace aah {

namespace {

// mean |x| and unbiased std of the B*T*D elements of head `h` of a (B, NH, T, D) tensor, one pass.
// The sums are taken around a shift (the head's first element) so that a large common offset does not cancel
// the variance away; the shift does not change the variance.
void head_stats(const float* x, int B, int NH, int h, int T, int D, double* mean_abs, double* std) {
  const size_t per_b = size_t(T) * D;
  const size_t n = size_t(B) * per_b;
  if (n == 0) {
    *mean_abs = 0, *std = 0;
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
  *mean_abs = s_abs / double(n);
  if (n < 2) {
    *std = 0;
    return;
  }
  const double var = (s2 - s1 * s1 / double(n)) / double(n - 1);
  *std = var > 0 ? std::sqrt(var) : 0.0;
}

}  // namespace

void controller_head_features(double* out, const float* q, const float* k, const float* v, int B, int H, int Hkv,
                              int T, int D, const double* entropy, const double* out_norm, const double* usage) {
  AAH_CHECK(H > 0 && Hkv > 0 && H % Hkv == 0, "[controller] features: H ", H, " Hkv ", Hkv);
  const int group = H / Hkv;
  // k/v statistics once per KV head, then copied to the query heads that read it.
  std::vector<double> kv(size_t(Hkv) * 4);
#pragma omp parallel for schedule(static)
  for (int j = 0; j < 2 * Hkv + H; j++) {
    if (j < H) {
      head_stats(q, B, H, j, T, D, &out[size_t(j) * kControllerFeatures + 0], &out[size_t(j) * kControllerFeatures + 1]);
    } else if (j < H + Hkv) {
      const int g = j - H;
      head_stats(k, B, Hkv, g, T, D, &kv[size_t(g) * 4 + 0], &kv[size_t(g) * 4 + 1]);
    } else {
      const int g = j - H - Hkv;
      head_stats(v, B, Hkv, g, T, D, &kv[size_t(g) * 4 + 2], &kv[size_t(g) * 4 + 3]);
    }
  }
  for (int h = 0; h < H; h++) {
    double* o = out + size_t(h) * kControllerFeatures;
    const double* s = &kv[size_t(h / group) * 4];
    o[2] = s[0], o[3] = s[1], o[4] = s[2], o[5] = s[3];
    o[6] = entropy ? entropy[h] : 0.0;
    o[7] = out_norm ? out_norm[h] : 0.0;
    o[8] = usage ? usage[h] : 0.0;
  }
}

}  // namespace aah
