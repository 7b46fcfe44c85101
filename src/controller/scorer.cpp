// AAH-v3 controller inputs and scorers (spec section 4). See scorer.h.
#include "controller/scorer.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/rng.h"

namespace aah {

double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440)); }

void linear_init_uniform(Linear& lin, int in, int out, Rng& rng) {
  lin.in = in, lin.out = out;
  lin.weight.resize(size_t(in) * out), lin.bias.resize(out);
  const double bound = 1.0 / std::sqrt(double(in));  // fan_in
  for (auto& w : lin.weight) w = float((2.0 * rng.uniform() - 1.0) * bound);
  for (auto& b : lin.bias) b = float((2.0 * rng.uniform() - 1.0) * bound);
}

Scorers scorers_init(int K, uint64_t layer_seed) {
  AAH_CHECK(K >= 1);
  Rng rng(layer_seed);
  Scorers s;
  s.K = K;
  linear_init_uniform(s.base.fc1, kEnrichedInputs, kBaseHidden, rng);
  linear_init_uniform(s.base.fc2, kBaseHidden, K, rng);
  linear_init_uniform(s.joint.fc1, kJointInputs, kJointHidden, rng);
  linear_init_uniform(s.joint.fc2, kJointHidden, 2 * K, rng);
  return s;
}

void linear_forward(double* y, const Linear& lin, const double* x) {
  for (int o = 0; o < lin.out; o++) {
    const float* w = &lin.weight[size_t(o) * lin.in];
    double acc = 0;
    for (int i = 0; i < lin.in; i++) acc += x[i] * double(w[i]);
    y[o] = acc + double(lin.bias[o]);
  }
}

void mlp_forward(double* y, const Mlp& mlp, const double* x, double* hidden) {
  linear_forward(hidden, mlp.fc1, x);
  for (int i = 0; i < mlp.fc1.out; i++) hidden[i] = gelu_erf(hidden[i]);
  linear_forward(y, mlp.fc2, hidden);
}

void enriched_input(double* u, const Hierarchy& hier, int r, int i) {
  constexpr int F = kControllerFeatures;
  const HierLevel& lv = hier.levels.at(r);
  const int R = hier.levels_used();
  const double* g = &lv.feature[size_t(i) * F];
  const bool top = r == R - 1 || lv.parent[i] < 0;
  const double* p = top ? g : &hier.levels[r + 1].feature[size_t(lv.parent[i]) * F];
  double gbar[F] = {};
  for (int k = 0; k < lv.size(); k++)
    for (int f = 0; f < F; f++) gbar[f] += lv.feature[size_t(k) * F + f];
  for (int f = 0; f < F; f++) gbar[f] /= double(lv.size());
  for (int f = 0; f < F; f++) u[f] = g[f];                                // g_i(r)
  u[F] = double(r) / double(std::max(1, R - 1));                          // eta_r
  for (int f = 0; f < F; f++) u[F + 1 + f] = g[f] - p[f];                 // g - p
  for (int f = 0; f < F; f++) u[2 * F + 1 + f] = g[f] - gbar[f];          // g - gbar
  u[3 * F + 1] = lv.size_frac[i];                                         // s_i(r)
}

void joint_input(double* j, const double* ua, const double* ub) {
  constexpr int E = kEnrichedInputs;
  for (int k = 0; k < E; k++) {
    j[k] = ua[k];
    j[E + k] = ub[k];
    j[2 * E + k] = ua[k] - ub[k];
    j[3 * E + k] = ub[k] - ua[k];
  }
}

}  // namespace aah
