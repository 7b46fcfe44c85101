// AAH-v3 controller inputs and scorers (spec section 4).
//
//   u_i(r) = [ g_i(r) (9), eta_r (1), g_i(r) - p_i(r) (9), g_i(r) - gbar(r) (9), s_i(r) (1) ]     29 numbers
//   f_base : 29 -> 64 -> K          logits z_i
//   f_joint: [u_a, u_b, u_a - u_b, u_b - u_a] (116) -> 256 -> 2K, reshaped (2, K): row 0 for a, row 1 for b
// A linear layer is y = x W^T + b with W stored (out, in); between the two layers the exact (erf) GELU.
// Weights are fp32 (as a PyTorch Linear would hold them), arithmetic is double. The scorers are never trained.
#pragma once
#include <cstdint>
#include <vector>

#include "controller/hierarchy.h"
#include "core/rng.h"

namespace aah {

constexpr int kEnrichedInputs = 2 * kControllerFeatures + kControllerFeatures + 2;  // 29
constexpr int kJointInputs = 4 * kEnrichedInputs;                                    // 116
constexpr int kBaseHidden = 64;
constexpr int kJointHidden = 256;

struct Linear {
  int in = 0, out = 0;
  std::vector<float> weight;  // (out, in)
  std::vector<float> bias;    // (out)
};

struct Mlp {
  Linear fc1, fc2;  // in -> hidden -> out, GELU between
};

struct Scorers {
  Mlp base;   // 29 -> 64 -> K
  Mlp joint;  // 116 -> 256 -> 2K
  int K = 0;
};

// gelu(x) = 0.5 x (1 + erf(x / sqrt(2))), the exact form.
double gelu_erf(double x);

// PyTorch Linear default init: every weight (row-major, (out, in) order), then every bias, drawn as
// (2 u - 1) / sqrt(in) with u = rng.uniform() in [0, 1), rounded to fp32.
void linear_init_uniform(Linear& lin, int in, int out, Rng& rng);

// Seed of one layer's scorers: controller_stream_seed(run_seed, kSeedStreamScorer, layer, 0) (see controller.h).
// Draw order from one Rng: base.fc1 (weight, bias), base.fc2, joint.fc1, joint.fc2.
Scorers scorers_init(int K, uint64_t layer_seed);

// y = x W^T + b for one vector x (in) -> y (out).
void linear_forward(double* y, const Linear& lin, const double* x);
// fc2(gelu(fc1(x))); `hidden` is scratch of fc1.out doubles.
void mlp_forward(double* y, const Mlp& mlp, const double* x, double* hidden);

// Enriched input u_i(r) (spec section 4) of item i at level r of `hier` into u (29):
// eta_r = r / max(1, R - 1); p = parent's feature (top level: p = g, so zeros); gbar = mean of the level's features.
void enriched_input(double* u, const Hierarchy& hier, int r, int i);
// j_ab = [u_a, u_b, u_a - u_b, u_b - u_a] (116).
void joint_input(double* j, const double* ua, const double* ub);

}  // namespace aah
