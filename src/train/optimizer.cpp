#include "train/optimizer.h"

#include <cmath>

namespace aah {

double lr_at(const TrainConfig& t, int step) {
  if (step < t.warmup_steps) return t.lr * double(step + 1) / double(t.warmup_steps);
  const int decay_steps = std::max(1, t.steps - t.warmup_steps);
  const double progress = std::min(1.0, double(step - t.warmup_steps) / decay_steps);
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress));
}

double global_norm(const float* g, size_t n) {
  constexpr int kChunks = 64;
  double partial[kChunks] = {};
  const size_t per = (n + kChunks - 1) / kChunks;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < kChunks; c++) {
    const size_t lo = std::min(n, c * per), hi = std::min(n, lo + per);
    double s = 0;
    for (size_t i = lo; i < hi; i++) s += double(g[i]) * g[i];
    partial[c] = s;
  }
  double s = 0;
  for (double p : partial) s += p;
  return std::sqrt(s);
}

void AdamW::init(const Model<float>& model) {
  const size_t n = model.num_params();
  m.assign(n, 0.0f);
  v.assign(n, 0.0f);
  decay.assign(n, 0);
  for (const ParamTensor& t : model.tensors())
    if (t.decay) std::fill(decay.begin() + t.offset, decay.begin() + t.offset + t.numel, 1);
  t = 0;
}

void AdamW::update(float* params, const float* grads, size_t n, double lr, const TrainConfig& cfg,
                   float grad_scale) {
  t++;
  const float b1 = float(cfg.beta1), b2 = float(cfg.beta2), eps = float(cfg.adam_eps);
  const float c1 = float(1.0 / (1.0 - std::pow(cfg.beta1, double(t))));
  const float c2 = float(1.0 / (1.0 - std::pow(cfg.beta2, double(t))));
  const float flr = float(lr), wd = float(cfg.weight_decay);
  float* mm = m.data();
  float* vv = v.data();
  const uint8_t* dec = decay.data();
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    const float g = grads[i] * grad_scale;
    mm[i] = b1 * mm[i] + (1 - b1) * g;
    vv[i] = b2 * vv[i] + (1 - b2) * g * g;
    const float step = (mm[i] * c1) / (std::sqrt(vv[i] * c2) + eps) + (dec[i] ? wd * params[i] : 0.0f);
    params[i] -= flr * step;
  }
}

}  // namespace aah
