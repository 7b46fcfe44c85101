// Whole-model checks: analytic gradients of Model<double> (reference kernels) against central finite differences,
// and the fast float model against the double reference on the same weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "model/model.h"

namespace aah {
namespace {

ModelConfig tiny_config(bool tied, bool gqa) {
  ModelConfig m;
  m.hidden_size = 16;
  m.intermediate_size = 24;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = gqa ? 2 : 4;
  m.head_dim = 8;
  m.vocab_size = 13;
  m.tie_word_embeddings = tied;
  m.rope_theta = 100.0;
  return m;
}

std::vector<int32_t> random_tokens(int n, int V, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(r.below(V));
  return t;
}

// Larger-than-default weights so every path (norm weights, attention patterns) carries signal.
template <class real>
void randomize(Model<real>& model, uint64_t seed) {
  Rng r(seed);
  for (const ParamTensor& t : model.tensors()) {
    real* w = model.params_data() + t.offset;
    for (size_t i = 0; i < t.numel; i++) w[i] = real(t.shape.size() == 1 ? 1.0 + 0.3 * r.normal() : 0.4 * r.normal());
  }
}

class ModelGrad : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(ModelGrad, MatchesFiniteDifferencesInDouble) {
  auto [tied, gqa] = GetParam();
  const int B = 2, T = 7;
  ModelConfig cfg = tiny_config(tied, gqa);
  Model<double> model(cfg, B, T);
  randomize(model, 1);
  // windows: mix of full and short, so the masked path is exercised too
  model.windows() = {7, 3, 1, 5, 7, 7, 2, 4};
  auto tokens = random_tokens(B * T + 1, cfg.vocab_size, 2);
  const int32_t* inp = tokens.data();
  const int32_t* tgt = tokens.data() + 1;

  model.zero_grads();
  model.forward(inp, tgt, B, T, float(1.0 / (B * T)));
  model.backward(inp, B, T);
  std::vector<double> analytic(model.grads_data(), model.grads_data() + model.num_params());

  double* w = model.params_data();
  const double h = 1e-5;
  double max_err = 0;
  int checked = 0;
  for (size_t i = 0; i < model.num_params(); i += 3) {  // every third parameter: all tensors are covered
    const double w0 = w[i];
    w[i] = w0 + h;
    const double lp = model.forward(inp, tgt, B, T);
    w[i] = w0 - h;
    const double lm = model.forward(inp, tgt, B, T);
    w[i] = w0;
    const double fd = (lp - lm) / (2 * h);
    const double err = std::fabs(fd - analytic[i]) / std::max(1e-3, std::fabs(fd) + std::fabs(analytic[i]));
    max_err = std::max(max_err, err);
    EXPECT_LT(err, 1e-6) << "param " << i << " fd " << fd << " analytic " << analytic[i];
    checked++;
  }
  EXPECT_GT(checked, 500);
  std::printf("checked %d parameters, max relative error %.2e\n", checked, max_err);
}

INSTANTIATE_TEST_SUITE_P(TiedGqa, ModelGrad,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(ModelFloat, MatchesDoubleReference) {
  for (bool tied : {true, false}) {
    const int B = 2, T = 33;
    ModelConfig cfg = tiny_config(tied, true);
    cfg.hidden_size = 32;
    cfg.head_dim = 16;
    Model<double> ref(cfg, B, T);
    Model<float> fast(cfg, B, T);
    randomize(ref, 3);
    for (size_t i = 0; i < ref.num_params(); i++) fast.params_data()[i] = float(ref.params_data()[i]);
    ref.windows() = fast.windows() = {33, 5, 1, 17, 33, 33, 2, 9};
    auto tokens = random_tokens(B * T + 1, cfg.vocab_size, 4);
    ref.zero_grads();
    fast.zero_grads();
    const double lr = ref.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f / (B * T));
    const double lf = fast.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f / (B * T));
    EXPECT_NEAR(lf, lr, 1e-5 * std::fabs(lr));
    ref.backward(tokens.data(), B, T);
    fast.backward(tokens.data(), B, T);
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.num_params(); i++) {
      const double d = fast.grads_data()[i] - ref.grads_data()[i];
      num += d * d;
      den += ref.grads_data()[i] * ref.grads_data()[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-5) << "tied=" << tied;
  }
}

// A toy backend, registered the way a new one is (one Backend filled in; kernels/backend.h): the scalar reference at
// float, wrapped to count its calls. A model that runs it takes every step through the table (the calls counted are
// the model's ops, one per layer and per logits chunk), and matches the double reference as the fast backend does.
struct CallCounts {
  int matmul_forward = 0, matmul_backward = 0, attention_forward = 0, attention_backward = 0, rmsnorm_forward = 0,
      crossentropy = 0;
};
CallCounts g_calls;

const Backend<float>& counting_backend() {
  static const Backend<float> b = [] {
    Backend<float> c = backend_named("ref");
    c.name = "counting";
    c.matmul_forward = [](float* out, const float* inp, const float* w, int N, int C, int OC) {
      g_calls.matmul_forward++;
      backend_named("ref").matmul_forward(out, inp, w, N, C, OC);
    };
    c.matmul_backward = [](float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int C,
                           int OC) {
      g_calls.matmul_backward++;
      backend_named("ref").matmul_backward(dinp, dw, dout, inp, w, N, C, OC);
    };
    c.rmsnorm_forward = [](float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) {
      g_calls.rmsnorm_forward++;
      backend_named("ref").rmsnorm_forward(out, rstd, x, w, N, C, eps);
    };
    c.crossentropy_forward_backward = [](float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                         int N, int V, float dscale) {
      g_calls.crossentropy++;
      backend_named("ref").crossentropy_forward_backward(losses, dlogits, logits, targets, N, V, dscale);
    };
    c.attention_forward = [](float* out, float* lse, const float* q, const float* k, const float* v, const int* window,
                             int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag, AttnCounters* counters) {
      g_calls.attention_forward++;
      backend_named("ref").attention_forward(out, lse, q, k, v, window, B, H, Hkv, T, D, diag, counters);
    };
    c.attention_backward = [](float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                              const float* q, const float* k, const float* v, const int* window, int B, int H, int Hkv,
                              int T, int D, AttnCounters* counters) {
      g_calls.attention_backward++;
      backend_named("ref").attention_backward(dq, dk, dv, dout, out, lse, q, k, v, window, B, H, Hkv, T, D, counters);
    };
    return c;
  }();
  return b;
}

TEST(Backend, AToyBackendCarriesTheWholeStep) {
  const int B = 2, T = 33;
  ModelConfig cfg = tiny_config(false, true);  // untied LM head, GQA, QK-norm on
  Model<double> ref(cfg, B, T);
  Model<float> toy(cfg, B, T);
  toy.backend = &counting_backend();
  randomize(ref, 5);
  for (size_t i = 0; i < ref.num_params(); i++) toy.params_data()[i] = float(ref.params_data()[i]);
  ref.windows() = toy.windows() = {33, 5, 1, 17, 33, 33, 2, 9};
  const auto tokens = random_tokens(B * T + 1, cfg.vocab_size, 6);
  ref.zero_grads();
  toy.zero_grads();
  g_calls = {};
  const double lr = ref.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f / (B * T));
  const double lt = toy.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f / (B * T));
  const int L = cfg.num_hidden_layers;
  EXPECT_EQ(g_calls.attention_forward, L);
  EXPECT_EQ(g_calls.crossentropy, 1);                     // 66 rows: one logits chunk
  EXPECT_EQ(g_calls.matmul_forward, 4 * L + 1);           // qkv, o, gate_up, down per layer; the LM head
  EXPECT_EQ(g_calls.rmsnorm_forward, 2 * L + 2 * L + 1);  // ln1, ln2, q-norm, k-norm per layer; the final norm
  EXPECT_EQ(g_calls.matmul_backward, 1);                  // the LM head's, pushed right away in forward
  toy.backward(tokens.data(), B, T);
  ref.backward(tokens.data(), B, T);
  EXPECT_EQ(g_calls.attention_backward, L);
  EXPECT_EQ(g_calls.matmul_backward, 1 + 4 * L);
  EXPECT_NEAR(lt, lr, 1e-5 * std::fabs(lr));
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.num_params(); i++) {
    const double d = toy.grads_data()[i] - ref.grads_data()[i];
    num += d * d, den += ref.grads_data()[i] * ref.grads_data()[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5);
}

// A bf16 backend's products read the model's bf16 copy of its weights (Weights16), rounded at each forward: a toy
// bf16 backend (the reference with bf16 set, its bf16-weight products counted) takes every weight product through
// matmul_forward_bf16w / matmul_backward_bf16w (the LM head's and gate_up's backward: matmul_backward_bf16, their
// dout written in bf16) and none through the fp32-weight entries, and its loss and gradients are those of the double
// model whose matrices are the bf16-rounded weights (the reference widens them exactly; activations stay fp32): the
// loss to fp32's sums, the gradients within u = 2^-8 (the two gradients rounded to bf16). After the weights change,
// the next forward reads the new ones.
struct Bf16wCounts {
  int fp32_weights = 0, forward = 0, backward = 0, bf16_dout_backward = 0;
};
Bf16wCounts g_bf16w;

const Backend<float>& counting_bf16_backend() {
  static const Backend<float> b = [] {
    Backend<float> c = backend_named("ref");
    c.name = "counting-bf16";
    c.bf16 = true;
    c.matmul_forward = [](float* out, const float* inp, const float* w, int N, int C, int OC) {
      g_bf16w.fp32_weights++;
      backend_named("ref").matmul_forward(out, inp, w, N, C, OC);
    };
    c.matmul_backward = [](float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int C,
                           int OC) {
      g_bf16w.fp32_weights++;
      backend_named("ref").matmul_backward(dinp, dw, dout, inp, w, N, C, OC);
    };
    c.matmul_forward_bf16w = [](float* out, const float* inp, const uint16_t* w, int N, int C, int OC) {
      g_bf16w.forward++;
      backend_named("ref").matmul_forward_bf16w(out, inp, w, N, C, OC);
    };
    c.matmul_backward_bf16w = [](float* dinp, float* dw, const float* dout, const float* inp, const uint16_t* w, int N,
                                 int C, int OC) {
      g_bf16w.backward++;
      backend_named("ref").matmul_backward_bf16w(dinp, dw, dout, inp, w, N, C, OC);
    };
    c.matmul_backward_bf16 = [](float* dinp, float* dw, const uint16_t* dout, const float* inp, const uint16_t* w,
                                int N, int C, int OC) {
      g_bf16w.bf16_dout_backward++;
      backend_named("ref").matmul_backward_bf16(dinp, dw, dout, inp, w, N, C, OC);
    };
    return c;
  }();
  return b;
}

// The value fp32 x has once stored in bf16 (round to nearest even), written out here as the test's own reference.
double bf16_rounded(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

TEST(Backend, Bf16ProductsReadWeightsRoundedAtEachForward) {
  const int B = 2, T = 33, L = 2;
  ModelConfig cfg = tiny_config(false, true);
  Model<double> ref(cfg, B, T);
  Model<float> toy(cfg, B, T);
  toy.backend = &counting_bf16_backend();
  randomize(toy, 7);
  const auto tokens = random_tokens(B * T + 1, cfg.vocab_size, 8);
  std::vector<size_t> matrices;  // offsets of every weight-matrix element (the products' operands)
  for (const ParamTensor& t : toy.tensors())
    if (t.decay && t.name.find("embed_tokens") == std::string::npos)
      for (size_t i = 0; i < t.numel; i++) matrices.push_back(t.offset + i);
  for (int round = 0; round < 2; round++) {
    if (round == 1)  // the optimizer's step, in effect: every weight moves
      for (size_t i = 0; i < toy.num_params(); i++) toy.params_data()[i] *= 1.0f + 0.01f * float(i % 7);
    for (size_t i = 0; i < toy.num_params(); i++) ref.params_data()[i] = toy.params_data()[i];
    const double l_unrounded = ref.forward(tokens.data(), tokens.data() + 1, B, T);
    for (size_t i : matrices) ref.params_data()[i] = bf16_rounded(toy.params_data()[i]);
    ref.zero_grads();
    toy.zero_grads();
    g_bf16w = {};
    const double lt = toy.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f / (B * T));
    const double lr = ref.forward(tokens.data(), tokens.data() + 1, B, T, 1.0f / (B * T));
    toy.backward(tokens.data(), B, T);
    ref.backward(tokens.data(), B, T);
    ASSERT_EQ(cfg.num_hidden_layers, L);
    EXPECT_EQ(g_bf16w.fp32_weights, 0);
    EXPECT_EQ(g_bf16w.forward, 4 * L + 1);  // qkv, o, gate_up, down per layer; the LM head
    EXPECT_EQ(g_bf16w.backward, 3 * L);     // qkv, o, down per layer
    EXPECT_EQ(g_bf16w.bf16_dout_backward, L + 1);  // gate_up's and the LM head's, their dout in bf16
    // The loss to float's sums (4e-8 relative seen), while reading the unrounded weights moves it 6e-5 .. 5e-4.
    EXPECT_NEAR(lt, lr, 1e-6 * std::fabs(lr)) << "round " << round;
    EXPECT_GT(std::fabs(l_unrounded - lr), 1e-5 * std::fabs(lr)) << "the rounding must show in the loss";
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.num_params(); i++) {
      const double d = toy.grads_data()[i] - ref.grads_data()[i];
      num += d * d, den += ref.grads_data()[i] * ref.grads_data()[i];
    }
    // Within u = 2^-8 normwise: the LM head's gradient, rounded to bf16 (u / 2 relative each), carried back.
    const double err = std::sqrt(num / den);
    EXPECT_LT(err, 1.0 / 256) << "round " << round;
    EXPECT_GT(err, 1e-6) << "the gradient in bf16 must show";
  }
}

// keep_rounded_weights (train_step's, for every micro-batch after a step's first): the next forward reads the bf16
// copy the last forward rounded, even if the fp32 weights moved since; the forward after it rounds again.
TEST(Backend, Bf16KeptWeightsAreTheLastForwardsCopyForOneForward) {
  const int B = 2, T = 17;
  ModelConfig cfg = tiny_config(false, true);
  Model<float> toy(cfg, B, T);
  toy.backend = &counting_bf16_backend();
  randomize(toy, 11);
  const auto tokens = random_tokens(B * T + 1, cfg.vocab_size, 12);
  const double before = toy.forward(tokens.data(), tokens.data() + 1, B, T);
  for (const ParamTensor& t : toy.tensors())  // move every matrix weight by far more than bf16's spacing
    if (t.decay && t.name.find("embed_tokens") == std::string::npos)
      for (size_t i = 0; i < t.numel; i++) toy.params_data()[t.offset + i] *= 1.25f;
  toy.keep_rounded_weights();
  const double kept = toy.forward(tokens.data(), tokens.data() + 1, B, T);
  EXPECT_EQ(kept, before) << "a kept copy is the last forward's, bit for bit";
  const double moved = toy.forward(tokens.data(), tokens.data() + 1, B, T);
  EXPECT_GT(std::fabs(moved - before), 1e-3) << "the next forward rounds the moved weights";
  toy.keep_rounded_weights();
  EXPECT_EQ(toy.forward(tokens.data(), tokens.data() + 1, B, T), moved);
}

}  // namespace
}  // namespace aah
