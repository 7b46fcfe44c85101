// The backend's memory (kernels/backend.h, Memory): a toy backend whose buffers are "device" memory the host cannot
// touch. Its allocations are pages the kernel protects (PROT_NONE) at all times except inside one of the backend's
// own calls, so any host code that reads or writes a model or optimizer buffer in place, instead of through the
// backend's copies, dies with SIGSEGV. Its kernels are the scalar reference, so a model on it must match a model on
// the reference in host memory bit for bit: training steps, the global norm, AdamW, saving and loading weights,
// evaluation, the before_attention hook's q, k, v, and decoding (the KV cache).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/rng.h"
#include "eval/eval.h"
#include "infer/decoder.h"
#include "model/model.h"
#include "model/weights.h"
#include "train/optimizer.h"
#include "helpers.h"

namespace aah {
namespace {

// The device: every live allocation (address, bytes), protected unless a backend call is in progress (the decoder
// calls attention_decode from several threads at once: a lock guards the count).
std::map<void*, size_t> g_device;
std::mutex g_lock;
int g_open = 0;        // backend calls in progress
int g_calls_open = 0;  // how many times the device was opened (the test checks it was used)

size_t page_rounded(size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

void protect_all(int prot) {
  for (auto [p, n] : g_device) ASSERT_EQ(mprotect(p, n, prot), 0);
}

// Opens the device for the duration of one backend call.
struct DeviceOpen {
  DeviceOpen() {
    std::lock_guard<std::mutex> hold(g_lock);
    if (g_open++ == 0) protect_all(PROT_READ | PROT_WRITE), g_calls_open++;
  }
  ~DeviceOpen() {
    std::lock_guard<std::mutex> hold(g_lock);
    if (--g_open == 0) protect_all(PROT_NONE);
  }
};

void* device_alloc(size_t bytes) {
  const size_t n = page_rounded(bytes);
  void* p = mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  // zeroed
  if (p == MAP_FAILED) std::abort();
  std::lock_guard<std::mutex> hold(g_lock);
  g_device[p] = n;
  if (g_open > 0) mprotect(p, n, PROT_READ | PROT_WRITE);
  return p;
}
void device_release(void* p) {
  std::lock_guard<std::mutex> hold(g_lock);
  munmap(p, g_device.at(p));
  g_device.erase(p);
}
void device_copy(void* dst, const void* src, size_t bytes) {
  DeviceOpen open;
  std::memcpy(dst, src, bytes);
}
void device_zero(void* p, size_t bytes) {
  DeviceOpen open;
  std::memset(p, 0, bytes);
}

// Each of the reference's operations, called with the device open.
template <auto Op>
struct Guarded;
template <class R, class... A, R (*Backend<float>::*Op)(A...)>
struct Guarded<Op> {
  static R call(A... a) {
    DeviceOpen open;
    return (backend_named("ref").*Op)(a...);
  }
};

// Registered the way a new backend is: one Backend filled in (kernels/backend.h).
const Backend<float>& device_backend() {
  static const Backend<float> b = [] {
    Backend<float> d = backend_named("ref");
    d.name = "toy-device";
#define AAH_GUARD(op) d.op = Guarded<&Backend<float>::op>::call
    AAH_GUARD(embedding_forward), AAH_GUARD(embedding_backward), AAH_GUARD(rmsnorm_forward);
    AAH_GUARD(rmsnorm_backward), AAH_GUARD(matmul_forward), AAH_GUARD(matmul_backward);
    AAH_GUARD(qkv_split_forward), AAH_GUARD(qkv_split_backward), AAH_GUARD(heads_merge_forward);
    AAH_GUARD(heads_merge_backward), AAH_GUARD(rope_forward), AAH_GUARD(rope_backward), AAH_GUARD(swiglu_forward);
    AAH_GUARD(swiglu_backward), AAH_GUARD(crossentropy_forward_backward), AAH_GUARD(attention_forward);
    AAH_GUARD(attention_backward), AAH_GUARD(residual_add), AAH_GUARD(sum_squares), AAH_GUARD(adamw_update);
    AAH_GUARD(attention_decode);
#undef AAH_GUARD
    d.memory = {device_alloc, device_release, device_copy, device_copy, device_copy, device_zero, false};
    return d;
  }();
  return b;
}

std::vector<float> host_params(Model<float>& m) {
  const HostCopy<float> p(m.backend->memory, m.params_data(), m.num_params());
  return std::vector<float>(p.data(), p.data() + m.num_params());
}

// One training step as train_step takes it (train/train.cpp): forward and backward, the gradient's norm, AdamW.
double step(Model<float>& m, AdamW& opt, const std::vector<int32_t>& tokens, int B, int T, TrainConfig& tc,
            double* norm) {
  m.zero_grads();
  const double loss = m.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f);
  m.backward(tokens.data(), B, T);
  const float scale = 1.0f / float(B * T);
  *norm = global_norm(*m.backend, m.grads_data(), m.num_params()) * scale;
  opt.update(m.params_data(), m.grads_data(), m.num_params(), 1e-2, tc, scale);
  return loss;
}

TEST(BackendMemory, AModelInDeviceMemoryTrainsSavesAndEvaluatesAsInHostMemory) {
  const int B = 2, T = 9;
  const ModelConfig cfg = test::small_model(13);
  Model<float> dev(cfg, B, T, true, device_backend());
  Model<float> host(cfg, B, T, true, backend_named("ref"));
  EXPECT_FALSE(dev.backend->memory.host);
  dev.init_weights(3), host.init_weights(3);
  ASSERT_EQ(host_params(dev), host_params(host));
  dev.windows() = host.windows() = {9, 2, 1, 5, 9, 9, 3, 4};

  // The hook gets q, k, v on the host (copies, on the device backend): the same values.
  std::vector<std::vector<float>> seen[2];
  for (int i = 0; i < 2; i++)
    (i ? host : dev).before_attention = [&seen, i, &cfg](int, const float* q, const float* k, const float* v, int B,
                                                         int T, int*) {
      const size_t nq = size_t(B) * T * cfg.num_attention_heads * cfg.head_dim,
                   nk = size_t(B) * T * cfg.num_key_value_heads * cfg.head_dim;
      std::vector<float> all(q, q + nq);
      all.insert(all.end(), k, k + nk);
      all.insert(all.end(), v, v + nk);
      seen[i].push_back(all);
    };

  AdamW opt_dev, opt_host;
  opt_dev.init(dev), opt_host.init(host);
  TrainConfig tc;
  tc.weight_decay = 0.1;
  Rng r(4);
  g_calls_open = 0;
  for (int s = 0; s < 3; s++) {
    std::vector<int32_t> tokens(B * T + 1);
    for (auto& t : tokens) t = int32_t(r.below(uint64_t(cfg.vocab_size)));
    double norm_dev = 0, norm_host = 0;
    const double loss_dev = step(dev, opt_dev, tokens, B, T, tc, &norm_dev);
    const double loss_host = step(host, opt_host, tokens, B, T, tc, &norm_host);
    EXPECT_EQ(loss_dev, loss_host) << "step " << s;
    EXPECT_EQ(norm_dev, norm_host) << "step " << s;
    EXPECT_GT(norm_host, 0);
    EXPECT_EQ(std::memcmp(dev.losses(), host.losses(), size_t(B) * T * sizeof(float)), 0);
  }
  EXPECT_GT(g_calls_open, 100) << "the toy's device was used";
  EXPECT_EQ(seen[0], seen[1]);
  EXPECT_EQ(seen[0].size(), size_t(3 * cfg.num_hidden_layers));
  const std::vector<float> trained = host_params(host);
  EXPECT_EQ(host_params(dev), trained);
  EXPECT_NE(trained, [&] {  // the steps moved the weights (the comparison above is not of two untouched models)
    Model<float> fresh(cfg, B, T, false, backend_named("ref"));
    fresh.init_weights(3);
    return host_params(fresh);
  }());

  // Saved from the device, loaded into host memory, and back onto the device: the same bytes.
  const std::string path = testing::TempDir() + "aah_backend_memory.safetensors";
  weights_save(path, dev, {});
  Model<float> loaded(cfg, B, T, false, backend_named("ref"));
  weights_load(path, loaded);
  EXPECT_EQ(host_params(loaded), trained);
  Model<float> dev2(cfg, B, T, false, device_backend());
  weights_load(path, dev2);
  EXPECT_EQ(host_params(dev2), trained);
  std::remove(path.c_str());

  // Evaluation reads the per-position losses on the host.
  dev2.windows() = loaded.windows() = dev.windows();
  std::vector<int32_t> val(4 * T + 1);
  for (auto& t : val) t = int32_t(r.below(uint64_t(cfg.vocab_size)));
  const EvalResult e_dev = eval_loss(dev2, val, T, 4, B), e_host = eval_loss(loaded, val, T, 4, B);
  EXPECT_EQ(e_dev.loss_sum, e_host.loss_sum);
  EXPECT_EQ(e_dev.position_loss_sum, e_host.position_loss_sum);
  EXPECT_EQ(e_dev.windows, 4);
}

// Decoding: the KV cache, the decoder's buffers and its logits in the device's memory; the same logits as on the host,
// through a batched prefill (the cache filled from the hook's copies) and single steps (filled on the device).
TEST(BackendMemory, ADecoderInDeviceMemoryDecodesAsInHostMemory) {
  const int T = 8, positions = 20;
  const ModelConfig cfg = test::small_model(13);
  Model<float> dev(cfg, 1, T, false, device_backend());
  Model<float> host(cfg, 1, T, false, backend_named("ref"));
  dev.init_weights(5), host.init_weights(5);
  dev.windows() = host.windows() = {8, 2, 1, 5, 8, 8, 3, 4};
  Decoder dd(dev, positions), dh(host, positions);
  EXPECT_EQ(dd.cache().bytes(), dh.cache().bytes());
  Rng r(6);
  std::vector<int32_t> prompt(T);
  for (auto& t : prompt) t = int32_t(r.below(uint64_t(cfg.vocab_size)));
  g_calls_open = 0;
  const float* ld = dd.prefill(prompt.data(), T);
  const float* lh = dh.prefill(prompt.data(), T);
  ASSERT_EQ(std::vector<float>(ld, ld + cfg.vocab_size), std::vector<float>(lh, lh + cfg.vocab_size));
  for (int i = 0; i < positions - T; i++) {
    const int32_t token = int32_t(r.below(uint64_t(cfg.vocab_size)));
    ld = dd.step(token), lh = dh.step(token);
    ASSERT_EQ(std::vector<float>(ld, ld + cfg.vocab_size), std::vector<float>(lh, lh + cfg.vocab_size)) << "step " << i;
  }
  EXPECT_GT(g_calls_open, 100);
}

// A backend that does not share the memory the model was built in is refused at the next forward.
TEST(BackendMemory, ABackendWithOtherMemoryIsRefused) {
  const ModelConfig cfg = test::small_model(13);
  Model<float> dev(cfg, 1, 4, true, device_backend());
  dev.backend = &backend_named("ref");
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5};
  const std::string err = test::error_of([&] { dev.forward(tokens.data(), tokens.data() + 1, 1, 4); });
  EXPECT_NE(err.find("does not use the memory"), std::string::npos) << err;
}

}  // namespace
}  // namespace aah
