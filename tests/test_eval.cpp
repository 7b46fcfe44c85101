// aah eval's metrics: loss by position against the scalar reference model's per-token losses, retrieval accuracy
// of synth questions against hand-worked answers, and the context of a Hugging Face directory.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>

#include "controller/copy_use.h"
#include "core/rng.h"
#include "eval/eval_run.h"
#include "eval/far_copy.h"
#include "eval/probe.h"
#include "eval/retrieval.h"
#include "helpers.h"
#include "core/files.h"
#include "formats/safetensors.h"
#include "data/shard.h"
#include "data/synth.h"
#include "kernels/ref/ref.h"
#include "kernels/ref/attention.h"
#include "model/weights.h"
#include "train/train.h"

namespace aah {
namespace {

using json = nlohmann::json;
using test::error_of;
using test::TempDir;

ModelConfig tiny_model() {
  ModelConfig m;
  m.hidden_size = 16;
  m.intermediate_size = 16;
  m.num_hidden_layers = 1;
  m.num_attention_heads = 2;
  m.num_key_value_heads = 1;
  m.head_dim = 8;
  m.vocab_size = 96;
  return m;
}

// A model directory as a Hugging Face one looks to aah eval: config.json (with the train block unless `hf`) and
// model.safetensors.
void write_model_dir(const std::string& dir, const Config& cfg, Model<float>& model, bool hf = false,
                     int max_position_embeddings = 0) {
  make_dirs(dir);
  json j = config_to_json(cfg);
  if (hf) {
    j.erase("train");
    j.erase("aah");
    j["max_position_embeddings"] = max_position_embeddings;
  }
  write_file_atomic(dir + "/config.json", j.dump(2));
  weights_save(dir + "/model.safetensors", model, {});
}

EvalRunOptions eval_options(const std::string& run, const std::string& data, int position_bucket = 64,
                            const std::vector<std::string>& sets = {}) {
  EvalRunOptions o;
  o.run = run;
  o.data = data;
  o.position_bucket = position_bucket;
  o.sets = sets;
  return o;
}

// Loss by position: the mean of the reference model's per-token losses over the positions of each bucket, summed
// here independently of the evaluation (three windows, micro-batches of two, a bucket that does not divide T).
TEST(EvalLossByPosition, MatchesTheReferencePerTokenLosses) {
  TempDir d("eval_pos");
  Config cfg;
  cfg.model = tiny_model();
  cfg.train.context = 40;
  cfg.train.batch_size = 2;
  cfg.train.eval_windows = 3;
  Model<float> model(cfg.model, 2, 40, false);
  model.init_weights(7);
  // Embeddings (tied: also the LM head) of standard deviation 1 rather than 0.02: token losses spread over several
  // nats, so the buckets' means differ.
  for (int i = 0; i < 96 * 16; i++) model.params().embed[i] *= 50;
  write_model_dir(d.path + "/run", cfg, model);
  Rng rng(3);
  std::vector<int32_t> tokens(200);
  for (auto& t : tokens) t = int32_t(rng.below(96));
  make_dirs(d.path + "/data");
  shard_write(d.path + "/data/val.bin", tokens, 96);

  const json e = eval_run(eval_options(d.path + "/run", d.path + "/data", 16));
  EXPECT_FALSE(e.contains("retrieval"));  // not synth data
  const json& lp = e["loss_by_position"];
  EXPECT_EQ(lp["bucket"], 16);
  EXPECT_EQ(lp["start"], json({0, 16, 32}));
  EXPECT_EQ(lp["tokens"], json({48, 48, 24}));  // 3 windows x (16, 16, 8) positions

  Model<double> ref(cfg.model, 1, 40, false);
  for (size_t i = 0; i < model.num_params(); i++) ref.params_data()[i] = model.params_data()[i];
  double sum[3] = {0, 0, 0}, total = 0;
  for (int w = 0; w < 3; w++) {
    ref.forward(tokens.data() + w * 40, tokens.data() + w * 40 + 1, 1, 40);
    for (int t = 0; t < 40; t++) sum[t / 16] += ref.acts().losses[t], total += ref.acts().losses[t];
  }
  ASSERT_EQ(lp["loss"].size(), 3u);
  EXPECT_NEAR(lp["loss"][0].get<double>(), sum[0] / 48, 1e-4);
  EXPECT_NEAR(lp["loss"][1].get<double>(), sum[1] / 48, 1e-4);
  EXPECT_NEAR(lp["loss"][2].get<double>(), sum[2] / 24, 1e-4);
  EXPECT_NEAR(e["val_loss"].get<double>(), total / 120, 1e-4);
  // The buckets differ from one another (a test of the split, not only of the mean).
  EXPECT_GT(std::abs(sum[0] / 48 - sum[1] / 48), 1e-2);
  EXPECT_GT(std::abs(sum[1] / 48 - sum[2] / 24), 1e-2);

  // One bucket wider than the context: the whole window.
  const json one = eval_run(eval_options(d.path + "/run", d.path + "/data", 64));
  EXPECT_EQ(one["loss_by_position"]["start"], json::array({0}));
  EXPECT_EQ(one["loss_by_position"]["tokens"], json::array({120}));
  EXPECT_NEAR(one["loss_by_position"]["loss"][0].get<double>(), one["val_loss"].get<double>(), 1e-9);

  EXPECT_NE(error_of([&] { eval_run(eval_options(d.path + "/run", d.path + "/data", 0)); })
                .find("--position-bucket 0"),
            std::string::npos);
}

// One window of T = 1300 filler words with questions placed by hand; the prediction is stubbed: right for some
// questions, wrong for the others.
TEST(EvalRetrieval, CountsAndBucketsHandBuiltQuestions) {
  const int T = 1300;
  std::vector<int32_t> tokens(T + 1);
  for (int i = 0; i <= T; i++) tokens[i] = 67 + (i * 7) % 29;  // words, never a marker or a key
  auto put = [&](int pos, std::vector<int32_t> ids) {
    for (size_t i = 0; i < ids.size(); i++) tokens[pos + i] = ids[i];
  };
  put(0, {40});                                // a key whose ASK was in the previous window: not counted
  put(10, {1, 3, 60}), put(110, {2, 3, 60});   // distance 100
  put(20, {1, 5, 62}), put(1120, {2, 5, 62});  // 1100
  put(200, {1, 4, 61}), put(500, {2, 4, 61});  // 300
  put(400, {1, 10, 68}), put(528, {2, 10, 68});  // 128: the second bucket (lo is inclusive)
  // Key 9 defined twice with different values: each question finds the DEF of its own value.
  put(300, {1, 9, 66}), put(900, {1, 9, 67}), put(1000, {2, 9, 66}), put(1010, {2, 9, 67});  // 700 and 110
  put(600, {2, 6, 63});                                                        // no DEF in the window
  put(1200, {1, 7, 64}), put(1230, {0}), put(1240, {2, 7, 64});                // DEF in the previous document
  put(1250, {1, 8, 65}), put(1299, {2});  // ASK is the last input: its key and value are not in the window
  tokens[1300] = 8;

  const std::vector<RetrievalQuestion> qs = retrieval_questions(tokens.data(), tokens.data() + 1, T);
  std::map<int, int> def_of_ask;
  for (auto& q : qs) {
    EXPECT_EQ(q.query, q.ask + 1);
    EXPECT_EQ(q.value, tokens[q.query + 1]);
    def_of_ask[q.ask] = q.def;
  }
  EXPECT_EQ(def_of_ask, (std::map<int, int>{{110, 10}, {500, 200}, {528, 400}, {1000, 300}, {1010, 900}, {1120, 20}}));

  // Right at the queries of ASK 110 and ASK 1000, wrong elsewhere; the loss at query q is q / 1000.
  std::vector<float> losses(T);
  for (int t = 0; t < T; t++) losses[t] = float(t) / 1000;
  auto predict = [&](int query) { return query == 111 || query == 1001 ? tokens[query + 1] : int32_t(95); };
  std::vector<RetrievalBucket> b = retrieval_buckets({128, 512, 1024, 2048});
  retrieval_score(b, tokens.data(), tokens.data() + 1, T, predict, losses.data());
  const json j = retrieval_json(b);
  // [0,128): 110 right, 1010 wrong; [128,512): 500, 528 wrong; [512,1024): 1000 right; [1024,inf): 1120 wrong.
  EXPECT_EQ(j["n"], 6);
  EXPECT_NEAR(j["accuracy"].get<double>(), 2.0 / 6, 1e-12);
  EXPECT_NEAR(j["loss"].get<double>(), (111 + 1011 + 501 + 529 + 1001 + 1121) / 6000.0, 1e-6);
  const double acc[4] = {0.5, 0.0, 1.0, 0.0}, loss[4] = {(111 + 1011) / 2000.0, (501 + 529) / 2000.0, 1.001, 1.121};
  const int n[4] = {2, 2, 1, 1}, lo[4] = {0, 128, 512, 1024};
  ASSERT_EQ(j["buckets"].size(), 4u);
  for (int i = 0; i < 4; i++) {
    const json& bk = j["buckets"][i];
    EXPECT_EQ(bk["lo"], lo[i]);
    EXPECT_EQ(bk["n"], n[i]);
    EXPECT_NEAR(bk["accuracy"].get<double>(), acc[i], 1e-12) << i;
    EXPECT_NEAR(bk["loss"].get<double>(), loss[i], 1e-6) << i;
  }
  EXPECT_EQ(j["buckets"][0]["hi"], 128);
  EXPECT_TRUE(j["buckets"][3]["hi"].is_null());

  // One bucket per candidate window: what each window up adds.
  const std::vector<RetrievalBucket> b256 = retrieval_buckets({32, 64, 128, 256});
  ASSERT_EQ(b256.size(), 4u);
  EXPECT_EQ(b256[1].lo, 32);
  EXPECT_EQ(b256[1].hi, 64);
  EXPECT_EQ(b256[3].lo, 128);
  EXPECT_EQ(b256[3].hi, -1);
  EXPECT_EQ(retrieval_buckets({64}).size(), 1u);
  // No question: every bucket is still listed, with null accuracy and loss.
  const json none = retrieval_json(retrieval_buckets({128, 512, 1024, 2048}));
  EXPECT_EQ(none["n"], 0);
  EXPECT_TRUE(none["accuracy"].is_null());
  ASSERT_EQ(none["buckets"].size(), 4u);
  for (auto& bk : none["buckets"]) EXPECT_TRUE(bk["accuracy"].is_null() && bk["loss"].is_null() && bk["n"] == 0);
}

// A synth corpus and a model whose answers are known: attention and MLP outputs zeroed (wo = w_down = 0), the
// model is a bigram one, logits = lm_head . rmsnorm(embed[token]); lm_head's row f(k) points along embed[k], so
// the prediction after key k is f(k). Questions whose value is f(k) are answered, the others not. Three windows
// of T = 1100 tokens, evaluated in micro-batches of two.
struct ControlledSynth {
  static constexpr int T = 1100, C = 16, V = 96;
  TempDir d{"eval_ret"};
  Config cfg;
  std::unique_ptr<Model<float>> model;
  std::vector<int32_t> tokens;
  static int f(int k) { return 67 + k % 29; }

  ControlledSynth() {
    cfg.model = tiny_model();
    cfg.model.tie_word_embeddings = false;
    cfg.train.context = T;
    cfg.train.batch_size = 2;
    cfg.train.eval_windows = 3;
    config_set(cfg, "aah.windows=[128,512,1024,1100]");  // retrieval buckets [0,128) [128,512) [512,1024) [1024,inf)
    model = std::make_unique<Model<float>>(cfg.model, 2, T, false);
    model->init_weights(5);
    Params<float>& p = model->params();
    std::fill(p.wo, p.wo + size_t(C) * 2 * 8, 0.0f);
    std::fill(p.w_down, p.w_down + size_t(C) * 16, 0.0f);
    std::fill(p.lm_head, p.lm_head + size_t(V) * C, 0.0f);
    for (int k = 5; k <= 15; k++) {  // the keys of the questions below: f(k) = 72 .. 82, one row each
      double norm = 0;
      for (int c = 0; c < C; c++) norm += double(p.embed[k * C + c]) * p.embed[k * C + c];
      for (int c = 0; c < C; c++) p.lm_head[f(k) * C + c] += float(3 * p.embed[k * C + c] / std::sqrt(norm));
    }
    write_model_dir(d.path + "/run", cfg, *model);

    tokens.resize(3 * T + 1);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = 67 + int(i * 7) % 29;
    auto put = [&](int window, int pos, std::vector<int32_t> ids) {
      for (size_t i = 0; i < ids.size(); i++) tokens[window * T + pos + i] = ids[i];
    };
    // Window 0
    put(0, 10, {1, 5, f(5)}), put(0, 60, {2, 5, f(5)});     // distance 50, answered
    put(0, 100, {1, 6, 80}), put(0, 300, {2, 6, 80});       // 200, not (f(6) = 73)
    put(0, 20, {1, 7, f(7)}), put(0, 1050, {2, 7, f(7)});   // 1030, answered
    put(0, 1000, {1, 8, f(8)}), put(1, 50, {2, 8, f(8)});   // DEF in the previous window: not counted
    put(0, 900, {1, 9, f(9)}), put(0, 1099, {2, 9, f(9)});  // ASK at the window's last input: not counted
    // Window 1
    put(1, 100, {1, 10, f(10)}), put(1, 700, {2, 10, f(10)});  // 600, answered
    put(1, 200, {1, 11, 90}), put(1, 328, {2, 11, 90});        // 128, not (f(11) = 78)
    put(1, 750, {1, 12, f(12)}), put(1, 800, {0}), put(1, 850, {2, 12, f(12)});  // another document: not counted
    // Window 2 (the second micro-batch)
    put(2, 5, {1, 13, f(13)}), put(2, 1095, {2, 13, f(13)});    // 1090, answered
    put(2, 30, {1, 14, 70}), put(2, 130, {2, 14, 70});          // 100, not (f(14) = 81)
    put(2, 600, {1, 15, f(15)}), put(2, 1098, {2, 15, f(15)});  // 498, answered; the value is the last target
    make_dirs(d.path + "/data");
    shard_write(d.path + "/data/val.bin", tokens, 96);
    write_file_atomic(d.path + "/data/meta.json", R"({"source": "synth", "keys": 64})");
  }

  // The attention output back on (random wo), so that cutting a head's window changes the answers; rewrites run/.
  void switch_attention_on() {
    Rng rng(31);
    for (int i = 0; i < C * 2 * 8; i++) model->params().wo[i] = float(0.7 * rng.normal());
    write_model_dir(d.path + "/run", cfg, *model);
  }

  // The hand computation of the loss of value v after key k.
  double loss_after(int k, int v) const {
    const Params<float>& p = model->params();
    double ms = 0;
    for (int c = 0; c < C; c++) ms += double(p.embed[k * C + c]) * p.embed[k * C + c] / C;
    const double rstd = 1 / std::sqrt(ms + cfg.model.rms_norm_eps);
    std::vector<double> logit(V);
    double mx = -1e300, sum = 0;
    for (int j = 0; j < V; j++) {
      for (int c = 0; c < C; c++) logit[j] += double(p.lm_head[j * C + c]) * p.embed[k * C + c] * rstd;
      mx = std::max(mx, logit[j]);
    }
    for (int j = 0; j < V; j++) sum += std::exp(logit[j] - mx);
    return mx + std::log(sum) - logit[v];
  }
};

// aah eval of the controlled model: the questions' windows and offsets, and the losses, against a hand
// computation.
TEST(EvalRetrieval, EvalOfAControlledModelOnAHandBuiltShard) {
  ControlledSynth cs;
  const TempDir& d = cs.d;
  auto f = ControlledSynth::f;
  auto loss_after = [&](int k, int v) { return cs.loss_after(k, v); };
  const json e = eval_run(eval_options(d.path + "/run", d.path + "/data"));
  ASSERT_TRUE(e.contains("retrieval")) << e.dump();
  const json& r = e["retrieval"];
  struct Q {
    int bucket, k, v;
  };
  const Q qs[] = {{0, 5, f(5)}, {0, 14, 70}, {1, 6, 80}, {1, 11, 90}, {1, 15, f(15)}, {2, 10, f(10)},
                  {3, 7, f(7)}, {3, 13, f(13)}};
  double loss[4] = {0, 0, 0, 0}, total = 0;
  int n[4] = {0, 0, 0, 0}, right[4] = {0, 0, 0, 0};
  for (const Q& q : qs) {
    loss[q.bucket] += loss_after(q.k, q.v), total += loss_after(q.k, q.v);
    n[q.bucket]++;
    right[q.bucket] += q.v == f(q.k);
  }
  EXPECT_EQ(r["n"], 8);
  EXPECT_NEAR(r["accuracy"].get<double>(), 5.0 / 8, 1e-12);
  EXPECT_NEAR(r["loss"].get<double>(), total / 8, 1e-4);
  for (int i = 0; i < 4; i++) {
    const json& bk = r["buckets"][i];
    EXPECT_EQ(bk["n"], n[i]) << i;
    EXPECT_NEAR(bk["accuracy"].get<double>(), double(right[i]) / n[i], 1e-12) << i;
    EXPECT_NEAR(bk["loss"].get<double>(), loss[i] / n[i], 1e-4) << i;
  }
  // The answered questions' loss is well below the others' (the hand model is not trivially wrong everywhere).
  EXPECT_LT(loss_after(5, f(5)) + 2, loss_after(11, 90));

  // far_copy: the bigram model's loss at a copy is loss_after(x_i, y_i); per bucket the mean over the copies that
  // far_copies finds in the three windows (the cyclic filler repeats every 29 tokens: many copies at distance 29).
  ASSERT_TRUE(e.contains("far_copy")) << e.dump();
  const json& fc = e["far_copy"];
  EXPECT_EQ(fc["ngram"], kFarCopyNgram);
  const int edges[4] = {0, 128, 512, 1024};
  double fl[4] = {0, 0, 0, 0};
  int64_t fn[4] = {0, 0, 0, 0};
  for (int w = 0; w < 3; w++) {
    const int32_t* in = cs.tokens.data() + w * ControlledSynth::T;
    for (const FarCopy& c : far_copies(in, in + 1, ControlledSynth::T, kFarCopyNgram)) {
      int b = 3;
      while (c.distance < edges[b]) b--;
      fl[b] += loss_after(in[c.pos], in[c.pos + 1]), fn[b]++;
    }
  }
  ASSERT_GT(fn[0], 1000);
  for (int b = 0; b < 4; b++) {
    EXPECT_EQ(fc["buckets"][b]["n"], fn[b]) << b;
    if (fn[b] > 0) {
      EXPECT_NEAR(fc["buckets"][b]["loss"].get<double>(), fl[b] / double(fn[b]), 1e-4) << b;
    }
  }
}

// The mass on a range of keys against the scalar reference attention: with values v[j] = (1 if j in [k0, k1),
// 0, ...), the reference's output row is exactly that mass. GQA (two heads per key/value head), windows full,
// short, 1 and between, ranges inside, across and outside the window.
TEST(ProbeHeads, MassMatchesTheReferenceAttention) {
  const int H = 4, Hkv = 2, T = 24, D = 8;
  Rng rng(12);
  std::vector<float> q(size_t(H) * T * D), k(size_t(Hkv) * T * D);
  for (auto& x : q) x = float(rng.normal());
  for (auto& x : k) x = float(rng.normal());
  const std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end());
  const int window[H] = {T, 6, 1, 11};
  const int ranges[][2] = {{0, 3}, {5, 8}, {15, 18}, {20, 24}, {0, 24}};
  for (auto [k0, k1] : ranges) {
    std::vector<double> v(size_t(Hkv) * T * D, 0.0), out(size_t(H) * T * D), lse(size_t(H) * T);
    for (int hk = 0; hk < Hkv; hk++)
      for (int j = k0; j < k1; j++) v[(size_t(hk) * T + j) * D] = 1;
    ref::attn_local_forward(out.data(), lse.data(), qd.data(), kd.data(), v.data(), window, 1, H, Hkv, T, D, nullptr,
                            nullptr);
    for (int h = 0; h < H; h++)
      for (int query : {0, 4, 17, 23}) {
        const double m = attn_mass(q.data(), k.data(), H, Hkv, T, D, h, window[h], query, k0, k1);
        EXPECT_NEAR(m, out[(size_t(h) * T + query) * D], 1e-12) << h << " " << query << " [" << k0 << ", " << k1 << ")";
      }
  }
  // A sanity value: a window of 1 puts all the mass on the query itself.
  EXPECT_EQ(attn_mass(q.data(), k.data(), H, Hkv, T, D, 2, 1, 17, 17, 18), 1.0);
  EXPECT_EQ(attn_mass(q.data(), k.data(), H, Hkv, T, D, 2, 1, 17, 0, 17), 0.0);
}

// aah probe heads on the controlled model: the accuracy at full windows is the hand-worked 5/8, no head matters
// (attention outputs are zeroed), and each head's DEF mass equals the reference attention's on the q and k of a
// double-precision copy of the model (one-hot values on the DEF's three tokens), averaged over the 8 questions.
TEST(ProbeHeads, ControlledModelOnAHandBuiltShard) {
  ControlledSynth cs;
  ProbeHeadsOptions o;
  o.run = cs.d.path + "/run";
  o.data = cs.d.path + "/data";
  const json r = probe_heads(o);
  EXPECT_NEAR(r["accuracy_full"].get<double>(), 5.0 / 8, 1e-12);
  EXPECT_EQ(r["questions"], 8);
  EXPECT_EQ(r["cut_window"], 128);  // the smallest candidate window (aah.windows of ControlledSynth)
  const int T = ControlledSynth::T, H = 2, Hkv = 1, D = 8;
  Model<double> ref(cs.cfg.model, 1, T, false);
  for (size_t i = 0; i < cs.model->num_params(); i++) ref.params_data()[i] = cs.model->params_data()[i];
  double mass[H] = {0, 0};
  std::vector<RetrievalQuestion> qs;
  ref.before_attention = [&](int, const double* q, const double* k, const double*, int, int, int* win) {
    for (const RetrievalQuestion& qu : qs) {
      std::vector<double> v(size_t(Hkv) * T * D, 0.0), out(size_t(H) * T * D), lse(size_t(H) * T);
      for (int j = qu.def; j < qu.def + 3; j++) v[size_t(j) * D] = 1;
      ref::attn_local_forward(out.data(), lse.data(), q, k, v.data(), win, 1, H, Hkv, T, D, nullptr, nullptr);
      for (int h = 0; h < H; h++) mass[h] += out[(size_t(h) * T + qu.query) * D];
    }
  };
  for (int w = 0; w < 3; w++) {
    const int32_t* in = cs.tokens.data() + w * T;
    qs = retrieval_questions(in, in + 1, T);
    ref.forward(in, in + 1, 1, T);
  }
  ASSERT_EQ(r["heads"].size(), 2u);
  for (int h = 0; h < H; h++) {
    const json& hd = r["heads"][h];
    EXPECT_EQ(hd["layer"], 0);
    EXPECT_EQ(hd["head"], h);
    EXPECT_EQ(hd["accuracy_drop"], 0.0);
    EXPECT_NEAR(hd["def_mass"].get<double>(), mass[h] / 8, 1e-6 * mass[h]) << h;
    EXPECT_GT(hd["def_mass"].get<double>(), 0.0);
  }
  // Not a synth corpus: a clear error.
  std::filesystem::remove(cs.d.path + "/data/meta.json");
  EXPECT_NE(error_of([&] { probe_heads(o); }).find("not a synth corpus"), std::string::npos);
}

// The oracle's cut table (policy oracle) on the controlled shard with the attention output switched back on (random
// wo): each head alone cut to each candidate window, the answers' mean loss minus that at full windows, against a
// double-precision copy of the model whose per-position losses are read at the 8 questions' queries directly.
TEST(ProbeHeads, OracleCutTableMatchesTheDoubleModel) {
  ControlledSynth cs;
  cs.switch_attention_on();
  const TokenShard val = shard_read(cs.d.path + "/data/val.bin");
  const RetrievalCutTable t = retrieval_cut_table(cs.cfg, cs.d.path + "/run", val);
  const int T = ControlledSynth::T, N = 2, K = 4;
  ASSERT_EQ(t.windows, (std::vector<int>{128, 512, 1024, 1100}));
  EXPECT_EQ(t.questions, 8);
  ASSERT_EQ(t.loss_increase.size(), size_t(N) * K);

  Model<double> ref(cs.cfg.model, 1, T, false);
  for (size_t i = 0; i < cs.model->num_params(); i++) ref.params_data()[i] = cs.model->params_data()[i];
  auto mean_answer_loss = [&](int head, int window) {  // head -1: every head full
    double sum = 0;
    int n = 0;
    for (int w = 0; w < 3; w++) {
      const int32_t* in = cs.tokens.data() + w * T;
      ref.set_full_windows(T);
      if (head >= 0) ref.windows()[size_t(head)] = window;
      ref.forward(in, in + 1, 1, T);
      for (const RetrievalQuestion& q : retrieval_questions(in, in + 1, T)) sum += ref.acts().losses[q.query], n++;
    }
    return sum / n;
  };
  const double full = mean_answer_loss(-1, 0);
  EXPECT_NEAR(t.loss_full, full, 1e-4);
  bool some_change = false;
  for (int h = 0; h < N; h++)
    for (int k = 0; k < K; k++) {
      const double want = k == K - 1 ? 0.0 : mean_answer_loss(h, t.windows[size_t(k)]) - full;
      EXPECT_NEAR(t.loss_increase[size_t(h) * K + k], want, 1e-4) << h << " " << k;
      some_change |= std::abs(want) > 1e-2;
    }
  EXPECT_TRUE(some_change) << "the cuts must matter for this test to test anything";
  // The oracle.json record: per head the table rows and the chosen window.
  const json j = retrieval_cut_table_json(t, {128, 1100});
  EXPECT_EQ(j["heads"][1]["window"], 1100);
  EXPECT_EQ(j["heads"][0]["loss_increase"].size(), 4u);
  EXPECT_EQ(j["questions"], 8);
}

// A run of regime oracle_budget_500 from that base: before step 0 it sets the windows the copy policy's exact solver
// picks on the cut table under pair budget 0.5, writes the table and the choice to oracle.json, and keeps them.
// Without train.init_from it says what it needs.
TEST(ProbeHeads, OracleRegimeTrainsOnTheWindowsOfTheCutTable) {
  ControlledSynth cs;
  cs.switch_attention_on();
  std::filesystem::copy_file(cs.d.path + "/data/val.bin", cs.d.path + "/data/train.bin");
  const TokenShard val = shard_read(cs.d.path + "/data/val.bin");
  const RetrievalCutTable t = retrieval_cut_table(cs.cfg, cs.d.path + "/run", val);
  const std::vector<int> c = copy_budget_choice(t.loss_increase.data(), 2, t.windows, 0.5);
  TrainOptions o;
  o.data_dir = cs.d.path + "/data";
  o.out_dir = cs.d.path + "/oracle";
  o.config = cs.cfg;
  o.quiet = true;
  // (aah.regime clears the knobs set before it: the candidate windows again after it)
  for (const char* s : {"aah.regime=oracle_budget_500", "aah.windows=[128,512,1024,1100]", "train.steps=2", "train.lr=1e-30", "train.min_lr=1e-30",
                        "train.warmup_steps=0", "train.eval_interval=100"})
    config_set(o.config, s);
  EXPECT_NE(error_of([&] { train_run(o); }).find("set train.init_from"), std::string::npos);
  config_set(o.config, "train.init_from=" + cs.d.path + "/run");
  o.force = true;
  ASSERT_EQ(train_run(o), 0);
  const json oracle = json::parse(read_file(o.out_dir + "/oracle.json"));
  SafetensorsReader state(o.out_dir + "/controller_state.safetensors");
  std::vector<int32_t> kept(2);
  state.read_raw("layers.0.windows", "I32", kept.data(), {2});
  for (int h = 0; h < 2; h++) {
    EXPECT_EQ(oracle["heads"][h]["window"], t.windows[size_t(c[size_t(h)])]) << h;
    EXPECT_EQ(kept[size_t(h)], t.windows[size_t(c[size_t(h)])]) << h;
    for (int k = 0; k < 4; k++)
      EXPECT_EQ(oracle["heads"][h]["loss_increase"][k].get<double>(), t.loss_increase[size_t(h) * 4 + k]);
  }
  EXPECT_LT(c[0] + c[1], 6) << "pair budget 0.5 cannot hold both heads full";
}

// A Hugging Face directory (config.json without a train block) is evaluated at its max_position_embeddings,
// capped at 8192; --set train.context=N still chooses.
TEST(EvalHuggingFace, ContextIsMaxPositionEmbeddingsCapped) {
  TempDir d("eval_hf");
  Config cfg;
  cfg.model = tiny_model();
  Model<float> model(cfg.model, 1, 8, false);
  model.init_weights(9);
  write_model_dir(d.path + "/small", cfg, model, /*hf=*/true, /*max_position_embeddings=*/48);
  write_model_dir(d.path + "/large", cfg, model, /*hf=*/true, /*max_position_embeddings=*/40960);
  Rng rng(4);
  std::vector<int32_t> tokens(8192 + 100);
  for (auto& t : tokens) t = int32_t(rng.below(96));
  make_dirs(d.path + "/data");
  shard_write(d.path + "/data/val.bin", tokens, 96);

  const json s = eval_run(eval_options(d.path + "/small", d.path + "/data"));
  EXPECT_EQ(s["context"], 48);
  EXPECT_EQ(s["windows"], 32);  // train.eval_windows
  const json l = eval_run(eval_options(d.path + "/large", d.path + "/data"));
  EXPECT_EQ(l["context"], 8192);
  EXPECT_EQ(l["windows"], 1);
  const json set = eval_run(eval_options(d.path + "/large", d.path + "/data", 64, {"train.context=100"}));
  EXPECT_EQ(set["context"], 100);
  // A run directory's config.json has train.context: it is kept.
  write_model_dir(d.path + "/run", cfg, model);
  EXPECT_EQ(eval_run(eval_options(d.path + "/run", d.path + "/data"))["context"], 256);
}

}  // namespace
}  // namespace aah
