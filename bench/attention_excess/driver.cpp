// Where a small window's extra time per pair goes (bench/attention_excess/run.sh): the attention kernel is compiled
// twice, with -Daah=aahx and -Daah=aahy, so that `perf` can tell the two copies apart. Window W runs through aahx
// and full windows through aahy, alternating in rounds, so both sides are sampled at the same machine state.
// Prints the median per-round time-per-pair ratio (the t/p of `aah bench attention`). With WF, aahy runs windows WF
// instead of full ones: compare.sh runs two versions of the kernel on the same windows this way.
//   driver T D W ROUNDS f|b [WF]      (B = 1, H = Hkv = 8, the threads OpenMP gives)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

// The two copies' entry points (kernels/ops.h, in their namespaces).
#define AAH_ATTENTION_COPY(ns)                                                                                  \
  namespace ns {                                                                                               \
  struct AttnDiagnostics;                                                                                      \
  struct AttnCounters;                                                                                         \
  namespace cpu {                                                                                              \
  void attn_local_forward(float*, float*, const float*, const float*, const float*, const int*, int, int, int, \
                          int, int, AttnDiagnostics*, AttnCounters*);                                          \
  void attn_local_backward(float*, float*, float*, const float*, const float*, const float*, const float*,     \
                           const float*, const float*, const int*, int, int, int, int, int, AttnCounters*);    \
  }                                                                                                            \
  }
AAH_ATTENTION_COPY(aahx)
AAH_ATTENTION_COPY(aahy)

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  if ((argc != 6 && argc != 7) || (argv[5][0] != 'f' && argv[5][0] != 'b')) {
    std::fprintf(stderr, "usage: %s T D W ROUNDS f|b [WF]\n", argv[0]);
    return 2;
  }
  const int B = 1, H = 8, T = std::atoi(argv[1]), D = std::atoi(argv[2]), W = std::atoi(argv[3]);
  const int rounds = std::atoi(argv[4]), WF = argc == 7 ? std::atoi(argv[6]) : T;
  const bool fwd = argv[5][0] == 'f';
  if (T < 64 || D < 8 || W < 1 || W > T || WF < 1 || WF > T || rounds < 1) {
    std::fprintf(stderr, "need T >= 64, D >= 8, 1 <= W, WF <= T, ROUNDS >= 1\n");
    return 2;
  }
  const size_t n = size_t(B) * H * T * D;
  std::vector<float> q(n), k(n), v(n), dout(n), out(n), lse(size_t(B) * H * T), dq(n), dk(n), dv(n);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0, 1);
  for (auto* x : {&q, &k, &v, &dout})
    for (auto& e : *x) e = normal(gen);
  const std::vector<int> small(H, W), full(H, WF);
  // one call of a copy's forward (as_forward) or backward with the windows `win`
  auto call = [&](auto forward, auto backward, const std::vector<int>& win, bool as_forward) {
    if (as_forward)
      forward(out.data(), lse.data(), q.data(), k.data(), v.data(), win.data(), B, H, H, T, D, nullptr, nullptr);
    else
      backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(), k.data(), v.data(),
               win.data(), B, H, H, T, D, nullptr);
  };
  auto run_small = [&] { call(aahx::cpu::attn_local_forward, aahx::cpu::attn_local_backward, small, fwd); };
  auto run_full = [&] { call(aahy::cpu::attn_local_forward, aahy::cpu::attn_local_backward, full, fwd); };
  call(aahy::cpu::attn_local_forward, aahy::cpu::attn_local_backward, full, true);  // O and lse for the backward
  auto pairs = [&](double w) { return H * (w * T - w * (w - 1) / 2); };
  // about as much work on both sides per round: the small window repeats full's pairs / its pairs times
  const int reps_full = std::max(1, int(2e8 / (pairs(WF) * D)));
  const int reps_small = std::max(1, int(reps_full * pairs(WF) / pairs(W)));
  std::vector<double> ratio;
  for (int r = 0; r < rounds; r++) {
    const double t0 = now();
    for (int i = 0; i < reps_small; i++) run_small();
    const double t1 = now();
    for (int i = 0; i < reps_full; i++) run_full();
    const double t2 = now();
    ratio.push_back(((t1 - t0) / (reps_small * pairs(W))) / ((t2 - t1) / (reps_full * pairs(WF))));
  }
  std::printf("%s T=%d D=%d W=%d: time per pair against %s W=%d, median of %d rounds: %.3f\n",
              fwd ? "forward" : "backward", T, D, W, WF == T ? "full windows," : "the second copy at", WF, rounds,
              median(ratio));
  // for the attribution (parts.py): pairs each side ran in this process, with the forward that made O and lse
  // (its samples count in a forward profile; the backward's leaves forward symbols out)
  std::printf("pairs run: small %.6g full %.6g\n", rounds * reps_small * pairs(W),
              (rounds * reps_full + (fwd ? 1 : 0)) * pairs(WF));
}
