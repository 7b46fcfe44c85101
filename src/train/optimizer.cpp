#include "train/optimizer.h"

#include <cmath>

#include "core/check.h"

namespace aah {

double lr_at(const TrainConfig& t, int step) {
  if (step < t.warmup_steps) return t.lr * double(step + 1) / double(t.warmup_steps);
  const int decay_steps = std::max(1, t.steps - t.warmup_steps);
  const double progress = std::min(1.0, double(step - t.warmup_steps) / decay_steps);
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress));
}

double global_norm(const Backend<float>& be, const float* g, size_t n) {
  return std::sqrt(be.sum_squares(g, n));
}

void AdamW::init(const Model<float>& model) {
  const size_t n = model.num_params();
  backend = model.backend;
  const Memory& mem = backend->memory;
  m = DeviceBuffer<float>(mem, n);  // zeroed
  v = DeviceBuffer<float>(mem, n);
  std::vector<uint8_t> d(n, 0);
  for (const ParamTensor& t : model.tensors())
    if (t.decay) std::fill(d.begin() + t.offset, d.begin() + t.offset + t.numel, 1);
  decay = DeviceBuffer<uint8_t>(mem, n);
  mem.upload(decay.data, d.data(), n);
  t = 0;
}

void AdamW::update(float* params, const float* grads, size_t n, double lr, const TrainConfig& cfg,
                   float grad_scale) {
  AAH_CHECK(backend && n == m.size, "AdamW::update before init, or for another model");
  t++;
  const AdamWStep s = {.lr = float(lr),
                       .beta1 = float(cfg.beta1),
                       .beta2 = float(cfg.beta2),
                       .eps = float(cfg.adam_eps),
                       .weight_decay = float(cfg.weight_decay),
                       .c1 = float(1.0 / (1.0 - std::pow(cfg.beta1, double(t)))),
                       .c2 = float(1.0 / (1.0 - std::pow(cfg.beta2, double(t)))),
                       .grad_scale = grad_scale};
  backend->adamw_update(params, m.data, v.data, decay.data, grads, n, s);
}

}  // namespace aah
