// Where a small window's extra time per pair goes (bench/attention_excess/run.sh): the attention kernel is compiled
// twice, with -Daah=aahx and -Daah=aahy, so that `perf` can tell the two copies apart. Window W runs through aahx
// and full windows through aahy, alternating in rounds, so both sides are sampled at the same machine state.
// Prints the median per-round time-per-pair ratio (the t/p of `aah bench attention`). With WF, aahy runs windows WF
// instead of full ones: compare.sh runs two versions of the kernel on the same windows this way.
//   driver T D W ROUNDS f|b [WF]      (B = 1, H = Hkv = 8, the threads OpenMP gives)
// W and WF are one window for every head, or 8 comma-separated ones (one per head: unequal windows take the
// backward's per-tile schedule).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
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
  const int B = 1, H = 8, T = std::atoi(argv[1]), D = std::atoi(argv[2]);
  const int rounds = std::atoi(argv[4]);
  const bool fwd = argv[5][0] == 'f';
  // "w" or "w0,w1,...,w7": the windows of the 8 heads; empty when malformed
  auto parse_windows = [&](const char* text) {
    std::vector<int> w;
    for (const char* p = text; *p;) {
      char* end;
      const long x = std::strtol(p, &end, 10);
      if (end == p || x < 1 || x > T || (*end && *end != ',')) return std::vector<int>{};
      w.push_back((int)x);
      p = *end ? end + 1 : end;
    }
    if (w.size() == 1) w.assign(H, w[0]);
    return w.size() == size_t(H) ? w : std::vector<int>{};
  };
  const std::string full_text = argc == 7 ? argv[6] : std::to_string(T);
  const std::vector<int> small = parse_windows(argv[3]), full = parse_windows(full_text.c_str());
  if (T < 64 || D < 8 || small.empty() || full.empty() || rounds < 1) {
    std::fprintf(stderr, "need T >= 64, D >= 8, windows W and WF in 1..T (one, or 8 comma-separated), ROUNDS >= 1\n");
    return 2;
  }
  const size_t n = size_t(B) * H * T * D;
  std::vector<float> q(n), k(n), v(n), dout(n), out(n), lse(size_t(B) * H * T), dq(n), dk(n), dv(n);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0, 1);
  for (auto* x : {&q, &k, &v, &dout})
    for (auto& e : *x) e = normal(gen);
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
  auto pairs = [&](const std::vector<int>& win) {
    double n = 0;
    for (double w : win) n += w * T - w * (w - 1) / 2;
    return n;
  };
  // about as much work on both sides per round: the small windows repeat full's pairs / their pairs times
  const int reps_full = std::max(1, int(2e8 / (pairs(full) * D)));
  const int reps_small = std::max(1, int(reps_full * pairs(full) / pairs(small)));
  std::vector<double> ratio;
  for (int r = 0; r < rounds; r++) {
    const double t0 = now();
    for (int i = 0; i < reps_small; i++) run_small();
    const double t1 = now();
    for (int i = 0; i < reps_full; i++) run_full();
    const double t2 = now();
    ratio.push_back(((t1 - t0) / (reps_small * pairs(small))) / ((t2 - t1) / (reps_full * pairs(full))));
  }
  std::printf("%s T=%d D=%d W=%s: time per pair against %s W=%s, median of %d rounds: %.3f\n",
              fwd ? "forward" : "backward", T, D, argv[3], full == std::vector<int>(H, T) ? "full windows," :
              "the second copy at", full_text.c_str(), rounds, median(ratio));
  // for the attribution (parts.py): pairs each side ran in this process, with the forward that made O and lse
  // (its samples count in a forward profile; the backward's leaves forward symbols out)
  std::printf("pairs run: small %.6g full %.6g\n", rounds * reps_small * pairs(small),
              (rounds * reps_full + (fwd ? 1 : 0)) * pairs(full));
}
