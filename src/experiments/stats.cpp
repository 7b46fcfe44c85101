#include "experiments/stats.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace aah {

namespace {

constexpr double kTiny = 1e-300;  // keeps the continued fraction's denominators off zero (modified Lentz)

// One term of the modified Lentz method: folds the partial numerator `aa` into (c, d); returns the factor c * d.
double lentz_step(double aa, double& c, double& d) {
  d = 1 + aa * d;
  if (std::fabs(d) < kTiny) d = kTiny;
  c = 1 + aa / c;
  if (std::fabs(c) < kTiny) c = kTiny;
  d = 1 / d;
  return c * d;
}

// The continued fraction of I_x(a, b) (Numerical Recipes' betacf), converging fast for x < (a + 1) / (a + b + 2):
// I_x(a, b) = x^a (1 - x)^b / (a B(a, b)) * 1 / (1 + d1 / (1 + d2 / (1 + ...))), with
// d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)) and d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m)).
double beta_continued_fraction(double a, double b, double x) {
  double c = 1, d = 1 - (a + b) * x / (a + 1);  // 1 + d_1
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 10000; m++) {
    h *= lentz_step(m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)), c, d);
    const double del = lentz_step(-(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)), c, d);
    h *= del;
    if (std::fabs(del - 1) < 1e-16) break;
  }
  return h;
}

}  // namespace

double beta_regularized(double a, double b, double x) {
  AAH_CHECK(a > 0 && b > 0 && x >= 0 && x <= 1, "a ", a, " b ", b, " x ", x);
  if (x == 0 || x == 1) return x;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) +
                                b * std::log1p(-x));  // x^a (1 - x)^b / B(a, b)
  if (x < (a + 1) / (a + b + 2)) return front * beta_continued_fraction(a, b, x) / a;
  return 1 - front * beta_continued_fraction(b, a, 1 - x) / b;  // I_x(a, b) = 1 - I_{1-x}(b, a)
}

double beta_regularized_inverse(double a, double b, double p) {
  AAH_CHECK(p >= 0 && p <= 1, "p ", p);
  double lo = 0, hi = 1;  // I_lo < p <= I_hi; I_x(a, b) rises with x
  for (int i = 0; i < 2000; i++) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;  // adjacent doubles
    (beta_regularized(a, b, mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double t_quantile(double p, int df) {
  AAH_CHECK(df >= 1 && p > 0 && p < 1, "p ", p, " df ", df);
  if (p < 0.5) return -t_quantile(1 - p, df);
  if (p == 0.5) return 0;
  const double x = beta_regularized_inverse(0.5 * df, 0.5, 2 * (1 - p));  // x = df / (df + t^2)
  return std::sqrt(df * (1 - x) / x);
}

double t_quantile_975(int df) {
  // Exact to the printed digits for df <= 30 (standard tables); above, the Cornish-Fisher expansion around the
  // normal quantile, within 2e-4 of the exact value.
  static const double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                  2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                  2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  AAH_CHECK(df >= 1);
  if (df <= 30) return kTable[df - 1];
  const double z = 1.959963984540054, n = df;
  return z + (z * z * z + z) / (4 * n) + (5 * std::pow(z, 5) + 16 * z * z * z + 3 * z) / (96 * n * n) +
         (3 * std::pow(z, 7) + 19 * std::pow(z, 5) + 17 * z * z * z - 15 * z) / (384 * n * n * n);
}

double t_quantile_95(int df) { return t_quantile(0.95, df); }

MeanInterval mean_interval(const std::vector<double>& x) {
  MeanInterval m;
  double sum = 0;
  for (double v : x)
    if (std::isfinite(v)) sum += v, m.n++;
  if (m.n == 0) return m;
  m.mean = sum / m.n;
  m.lo = m.hi = m.mean;
  if (m.n < 2) return m;
  double ss = 0;
  for (double v : x)
    if (std::isfinite(v)) ss += (v - m.mean) * (v - m.mean);
  m.se = std::sqrt(ss / (m.n - 1) / m.n);
  const double half = t_quantile_975(m.n - 1) * m.se;
  m.lo = m.mean - half, m.hi = m.mean + half;
  return m;
}

Interval interval90(const MeanInterval& m) {
  if (m.n < 2) return {m.mean, m.mean};
  const double half = t_quantile_95(m.n - 1) * m.se;
  return {m.mean - half, m.mean + half};
}

double equivalence_bound90(const MeanInterval& m) {
  if (m.n < 2) return NAN;
  const Interval i = interval90(m);
  return std::max(std::fabs(i.lo), std::fabs(i.hi));
}

Proportion clopper_pearson(int k, int n) {
  AAH_CHECK(n >= 0 && k >= 0 && k <= n, "k ", k, " n ", n);
  Proportion p{k, n, 0, 1};
  if (n == 0) return p;
  if (k > 0) p.lo = beta_regularized_inverse(k, n - k + 1, 0.025);
  if (k < n) p.hi = beta_regularized_inverse(k + 1, n - k, 0.975);
  return p;
}

}  // namespace aah
