// The statistics of the suite report: Student's t intervals over seeds, the equivalence bound a paired difference
// supports, and exact binomial (Clopper-Pearson) intervals for all-or-nothing per-seed outcomes. Everything rests
// on the regularized incomplete beta function, written here (Numerical Recipes' continued fraction) so that no
// library is needed; tests/test_stats.cpp checks it against hand-worked and tabled values.
#pragma once
#include <vector>

namespace aah {

// I_x(a, b), the regularized incomplete beta function (a, b > 0, 0 <= x <= 1): the CDF of a Beta(a, b) variable.
double beta_regularized(double a, double b, double x);
// The x with I_x(a, b) = p, by bisection on [0, 1] to the last bit.
double beta_regularized_inverse(double a, double b, double p);

// The p quantile of Student's t with df >= 1 degrees of freedom (0 < p < 1), from the incomplete beta:
// P(|T| > t) = I_{df / (df + t^2)}(df / 2, 1 / 2).
double t_quantile(double p, int df);
// 0.975 quantile (the half-width factor of a 95% interval): the standard table's three decimals for df <= 30
// (what the suite's tests and earlier reports quote), a Cornish-Fisher expansion above.
double t_quantile_975(int df);
// 0.95 quantile (the half-width factor of a 90% interval), exact: t_quantile(0.95, df).
double t_quantile_95(int df);

struct MeanInterval {
  int n = 0;
  double mean = 0, lo = 0, hi = 0;  // lo == hi == mean when n < 2
  double se = 0;                    // standard error of the mean (0 when n < 2)
};
// Mean and 95% t-interval of x (NaN entries are ignored).
MeanInterval mean_interval(const std::vector<double>& x);

struct Interval {
  double lo = 0, hi = 0;
};
// The 90% t-interval of m: mean -+ t_quantile_95(n - 1) * se ({mean, mean} when n < 2).
Interval interval90(const MeanInterval& m);
// The equivalence bound a paired difference supports: max(|lo90|, |hi90|), the smallest B with the 90% interval
// inside [-B, B] (two one-sided tests at 5% exclude every |difference| > B). NaN when n < 2.
double equivalence_bound90(const MeanInterval& m);

// k successes of n, with the exact Clopper-Pearson 95% interval for k / n: lo = Beta^-1(0.025; k, n - k + 1)
// (0 when k = 0), hi = Beta^-1(0.975; k + 1, n - k) (1 when k = n); [0, 1] when n = 0. Never outside [0, 1].
struct Proportion {
  int k = 0, n = 0;
  double lo = 0, hi = 1;
};
Proportion clopper_pearson(int k, int n);

}  // namespace aah
