// Causal attention with one window per head, its products in bf16 (train.precision=bf16 on a CPU with AVX-512 BF16):
// the same windows and tile visits as the fp32 kernel (kernels/cpu/attention.cpp), bf16 operands into the tile
// products, fp32 accumulation, fp32 softmax, running max and sums, fp32 outputs and gradients. The tile products run
// on AMX tiles where the CPU has them (amx_gemm), else with AVX-512 BF16 dot products (dot_gemm, e.g. AMD Zen 4 and
// 5); everything else is the same code for both.
//
// The layout is the fp32 kernel's: a tile pair's scores are S^T, keys as rows and queries as columns, so that every
// per-query quantity (running max, sum, lse, Delta) is one 16-float vector. An AMX product C (M, N) += A (M, K) B
// (K, N) reads A row-major and B "in pairs of rows" (row k/2 holds B[k][n], B[k + 1][n] next to each other; the dot
// products read the same, a pair per lane), so the inputs are rounded once into the layouts the products read
// (pack_*, O(T D) per call):
//   kA, vA (T, D)  K and V as A          kT, vT (D, T)  K^T and V^T as A (per tile of 64 positions)
//   qB, oB (D/2, T, 2) Q / sqrt(D) and dO as B over d (per tile)         qP, oP (T/2, D, 2) Q and dO as B over t
// and per tile pair (64 keys x 64 queries):
//   forward   S^T = kA qB, softmax pass -> P^T in pairs of rows, O^T (D, 64) = diag(alpha) O^T + vT P^T
//   backward  S^T = kA qB, dP^T = vA oB, pass -> P^T and dS^T (rows) and dS^T (pairs of rows),
//             dV += P^T oP, dK += dS^T qP, dQ^T += kT dS^T
// The forward rounds K and V of every head first (a key tile serves several query tiles), and each query tile its
// own Q; the backward's task (one key/value head) rounds its head's K and V and its query heads' Q and dO itself,
// into its thread's buffers, so that they are still in that core's cache when its products read them.
// Work follows the windows: the key tiles a query tile visits are the fp32 kernel's; inside a boundary tile the
// products skip the 32 x 32 blocks that hold no visible pair (TileBand) and the passes run over the rows some query
// of a column group sees, masking the rest (the products are cheap next to those passes on AMX).
// The probabilities P take the short exp (cpu::vexp_short, within 2^-16 relative: P is rounded to bf16 next); the
// running max's rescale factor keeps the full one (its error would compound over the key tiles).
// Calls with diagnostics (the controller's update steps), head dims that are not a multiple of 32, and CPUs or
// builds without AVX-512 BF16 run the fp32 kernel.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "core/arena.h"
#include "core/check.h"
#include "kernels/bf16/bf16.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vexp.h"
#include "kernels/ops.h"

// AAH_BF16_ATTN: the kernel is compiled in (AVX-512 BF16: its roundings and its dot products); AAH_AMX: its tile
// products on AMX as well.
#if defined(AAH_AVX512) && defined(__AVX512BF16__)
#define AAH_BF16_ATTN 1
#include <omp.h>
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define AAH_AMX 1
#endif
#endif

namespace aah::bf16 {
namespace {
// The calls a bf16 kernel takes: a head dim that is a multiple of 32 and no diagnostics asked for.
bool bf16_shape(int D, const AttnDiagnostics* diag) {
  return D % 32 == 0 && !(diag && (diag->entropy || diag->out_norm || diag->usage));
}
}  // namespace

#ifdef AAH_BF16_ATTN
AAH_AVX512_WARNINGS_OFF
namespace {

using cpu::Vec16;
constexpr int kTile = 64;  // queries per query tile = keys per key tile (the fp32 kernel's)
// Masked scores; the running max starts above them (as in the fp32 kernel).
constexpr float kMasked = -1e30f, kNegBig = -1e20f;

// Which 32 x 32 blocks of a tile pair hold a visible (query, key) pair: queries q0 + qi .. q0 + qi + 31 against
// keys k0 + ki .. k0 + ki + 31. Boundary tiles skip the blocks of their products that hold none (the passes mask
// what such a block would have held, and P^T and dS^T are 0 there).
struct TileBand {
  int q0, k0, W;
  bool inner;
  bool visible(int qi, int ki) const {
    if (inner) return true;
    const int64_t dmax = (int64_t)q0 + qi + 31 - (k0 + ki), dmin = (int64_t)q0 + qi - (k0 + ki + 31);
    return dmax >= 0 && dmin < W;
  }
};

#ifdef AAH_AMX
// Linux hands out AMX's tile registers only to a process that asks (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA); the answer is the run-time check that the CPU and kernel have AMX. This kernel also follows
// oneDNN's choice of instructions, so that ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 turns AMX off for the products and
// the attention alike (the AVX-512 BF16 path of a CPU without AMX, measured on one with it).
bool amx_permitted() {
  static const bool ok =
      isa() == "avx512_core_amx" && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
  return ok;
}

// Every tile register 16 rows x 64 bytes: 16 x 16 fp32 (C), 16 x 32 bf16 (A), 16 pairs of rows x 16 columns (B).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
void tiles_configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
}

// C (M, N) fp32 = [C +] A (M, K) B (K, N): A bf16 row-major, B bf16 in pairs of rows (row k/2 holds (B[k][n],
// B[k + 1][n]) for each n), strides in elements. M, N multiples of 32, K of 32. Blocks of 32 x 32 of C in tiles 0-3,
// the two A tiles in 4-5 and the two B tiles in 6-7. need(i, j, k): whether the block at row i, column j needs the
// k chunk [k, k + 32); a block that needs none is skipped where `skip_empty` (else it is set or kept as it is).
template <bool kAccumulate, class Need>
uint64_t amx_gemm(float* C, int64_t ldc, const uint16_t* A, int64_t lda, const uint16_t* Bp, int64_t ldb, int M, int N,
                  int K, const Need& need, bool skip_empty) {
  uint64_t macs = 0;
  for (int i = 0; i < M; i += 32)
    for (int j = 0; j < N; j += 32) {
      if (skip_empty) {
        bool any = false;
        for (int k = 0; k < K && !any; k += 32) any = need(i, j, k);
        if (!any) continue;
      }
      float* c = C + i * ldc + j;
      if (kAccumulate) {
        _tile_loadd(0, c, ldc * 4);
        _tile_loadd(1, c + 16, ldc * 4);
        _tile_loadd(2, c + 16 * ldc, ldc * 4);
        _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int k = 0; k < K; k += 32) {
        if (!need(i, j, k)) continue;
        macs += 32 * 32 * 32;
        _tile_loadd(4, A + i * lda + k, lda * 2);
        _tile_loadd(5, A + (i + 16) * lda + k, lda * 2);
        _tile_loadd(6, Bp + (k / 2) * ldb + 2 * j, ldb * 2);
        _tile_loadd(7, Bp + (k / 2) * ldb + 2 * (j + 16), ldb * 2);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c, ldc * 4);
      _tile_stored(1, c + 16, ldc * 4);
      _tile_stored(2, c + 16 * ldc, ldc * 4);
      _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
    }
  return macs;
}
#endif

// The same product with AVX-512 BF16 dot products (CPUs without AMX, e.g. AMD Zen 4 and 5): vdpbf16ps adds to each
// of 16 fp32 lanes the products of one pair of bf16 values, so a row of B in pairs of rows (16 columns x 2 k) is one
// operand as it lies and A's pair (A[i][k], A[i][k + 1]) a broadcast word. A 32 x 32 block of C is made 8 rows at a
// time in 16 accumulators; the same arguments, skips and counts as amx_gemm.
template <bool kAccumulate, class Need>
uint64_t dot_gemm(float* C, int64_t ldc, const uint16_t* A, int64_t lda, const uint16_t* Bp, int64_t ldb, int M, int N,
                  int K, const Need& need, bool skip_empty) {
  uint64_t macs = 0;
  for (int i = 0; i < M; i += 32)
    for (int j = 0; j < N; j += 32) {
      int chunks = 0;
      for (int k = 0; k < K; k += 32) chunks += need(i, j, k);
      if (skip_empty && chunks == 0) continue;
      macs += (uint64_t)chunks * 32 * 32 * 32;
      for (int r0 = i; r0 < i + 32; r0 += 8) {
        __m512 acc[8][2];
        for (int r = 0; r < 8; r++)
          for (int h = 0; h < 2; h++)
            acc[r][h] = kAccumulate ? _mm512_loadu_ps(C + (r0 + r) * ldc + j + 16 * h) : _mm512_setzero_ps();
        for (int k = 0; k < K; k += 32) {
          if (!need(i, j, k)) continue;
          for (int kk = k; kk < k + 32; kk += 2) {
            const uint16_t* b = Bp + (kk / 2) * ldb + 2 * j;
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 32);
            for (int r = 0; r < 8; r++) {
              int32_t pair;
              std::memcpy(&pair, A + (r0 + r) * lda + kk, 4);
              const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
              acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
              acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
            }
          }
        }
        for (int r = 0; r < 8; r++)
          for (int h = 0; h < 2; h++) _mm512_storeu_ps(C + (r0 + r) * ldc + j + 16 * h, acc[r][h]);
      }
    }
  return macs;
}

// Which instructions run the tile products of a call: AMX tiles or AVX-512 BF16 dot products.
template <bool kAccumulate, class Need>
uint64_t tile_gemm(bool amx, float* C, int64_t ldc, const uint16_t* A, int64_t lda, const uint16_t* Bp, int64_t ldb,
                   int M, int N, int K, const Need& need, bool skip_empty) {
#ifdef AAH_AMX
  if (amx) return amx_gemm<kAccumulate>(C, ldc, A, lda, Bp, ldb, M, N, K, need, skip_empty);
#else
  (void)amx;
#endif
  return dot_gemm<kAccumulate>(C, ldc, A, lda, Bp, ldb, M, N, K, need, skip_empty);
}
// The score products S^T, dP^T (keys as rows, queries as columns): blocks without a visible pair are skipped.
// Every product returns the multiply-adds it executed.
uint64_t scores_product(bool amx, float* C, const uint16_t* A, int64_t lda, const uint16_t* Bp, int D,
                        const TileBand& band) {
  return tile_gemm<false>(
      amx, C, kTile, A, lda, Bp, 2 * kTile, kTile, kTile, D, [&](int i, int j, int) { return band.visible(j, i); },
      true);
}
// The products that sum over the pair's keys or queries: C [+]= A B with `need` over the summed chunk.
template <class Need>
uint64_t sum_product(bool amx, bool accumulate, float* C, int64_t ldc, const uint16_t* A, int64_t lda,
                     const uint16_t* Bp, int64_t ldb, int M, int N, const Need& need) {
  if (accumulate) return tile_gemm<true>(amx, C, ldc, A, lda, Bp, ldb, M, N, kTile, need, false);
  return tile_gemm<false>(amx, C, ldc, A, lda, Bp, ldb, M, N, kTile, need, false);
}

// Work counts of a thread (AttnCounters: score elements computed, tile pairs visited, multiply-adds).
struct Work {
  uint64_t computed = 0, visited = 0, macs = 0;
};

// Two rows of 16 fp32 values -> one row of 16 bf16 pairs (row j in the low half of each pair, row j + 1 high).
inline __m512i round_pair(__m512 row_j, __m512 row_j1) {
  // one conversion of both (row j in the low 16 values, row j + 1 in the high), then one interleaving permute
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(row_j1, row_j));
}
// 16 fp32 -> 16 bf16 stored at p.
inline void store_rounded(uint16_t* p, __m512 x) {
  _mm256_storeu_si256((__m256i*)p, (__m256i)_mm512_cvtneps_pbh(x));
}

// ---------------------------------------------------------------------------------------------------------------
// Packing one head: src (T, D) fp32 times `scale`, rounded into dst; rows T .. Tp - 1 are zero. D is a multiple of
// 32 and Tp of 64. The two transposed layouts are blocked by tile (64 positions), so that the 16 rows a tile load
// reads are 128 or 256 bytes apart, not Tp * 2 or 4 (a multiple of 4 KB puts them all in one L1 set); each is a
// 32-bit transpose of a plain layout, per tile (a pair of bf16 values is one word).

enum class Layout {
  rows,        // (Tp, D)
  pairs_of_t,  // (Tp/2, D, 2): B over t
  pairs_of_d,  // (Tp/64, D/2, 64, 2): B over d, per tile = the words of `rows` (64, D/2) transposed
  cols,        // (Tp/64, D, 64): A over t, per tile = the words of `pairs_of_t` (32, D) transposed
};
inline __m512 load_row(const float* src, int t, int T, int D, int d, __m512 scale) {
  return t < T ? _mm512_mul_ps(_mm512_loadu_ps(src + (int64_t)t * D + d), scale) : _mm512_setzero_ps();
}
void pack_rows(uint16_t* dst, const float* src, int T, int Tp, int D, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int t = 0; t < Tp; t++)
    for (int d = 0; d < D; d += 16) store_rounded(dst + (int64_t)t * D + d, load_row(src, t, T, D, d, sc));
}
void pack_pairs_of_t(uint16_t* dst, const float* src, int T, int Tp, int D, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int t = 0; t < Tp; t += 2)
    for (int d = 0; d < D; d += 16)
      _mm512_storeu_si512(dst + (int64_t)t * D + 2 * d,
                          round_pair(load_row(src, t, T, D, d, sc), load_row(src, t + 1, T, D, d, sc)));
}
// In-register 16 x 16 transpose of 32-bit words: r[i] holds row i on entry and column i on return.
inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; i++) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}
// dst (cols, rows) = src (rows, cols)^T in 32-bit words, in 16 x 16 blocks; rows and cols multiples of 16.
void transpose_words(uint32_t* dst, const uint32_t* src, int rows, int cols) {
  for (int r0 = 0; r0 < rows; r0 += 16)
    for (int c0 = 0; c0 < cols; c0 += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(src + (int64_t)(r0 + i) * cols + c0);
      transpose16(r);
      for (int i = 0; i < 16; i++) _mm512_storeu_si512(dst + (int64_t)(c0 + i) * rows + r0, r[i]);
    }
}
// One output of pack_head: dst (Tp * D) in `layout`, the values times `scale`.
struct PackOut {
  uint16_t* dst;
  Layout layout;
  float scale;
};
// One tile of one head (positions t0 .. t0 + 63: `rows` of them from `in`, the rest zero) into `dst`, the tile's
// place in its layout (t0 D values into the head). tmp: kTile * D values of scratch.
void pack_tile(uint16_t* dst, Layout layout, const float* in, int rows, int D, float scale, uint16_t* tmp) {
  switch (layout) {
    case Layout::rows:
      pack_rows(dst, in, rows, kTile, D, scale);
      break;
    case Layout::pairs_of_t:
      pack_pairs_of_t(dst, in, rows, kTile, D, scale);
      break;
    case Layout::pairs_of_d:
      pack_rows(tmp, in, rows, kTile, D, scale);
      transpose_words((uint32_t*)dst, (const uint32_t*)tmp, kTile, D / 2);
      break;
    case Layout::cols:
      pack_pairs_of_t(tmp, in, rows, kTile, D, scale);
      transpose_words((uint32_t*)dst, (const uint32_t*)tmp, kTile / 2, D);
      break;
  }
}
// One head: src (T, D) -> each output. A tile's values (positions t0 .. t0 + 63) lie in [t0 D, (t0 + 64) D) of the
// head in every layout, so the outputs are made a tile at a time: the tile's source rows come from memory once, the
// other outputs read them from L1.
void pack_head(const float* src, int T, int Tp, int D, std::initializer_list<PackOut> outs, uint16_t* tmp) {
  for (int t0 = 0; t0 < Tp; t0 += kTile)
    for (const PackOut& o : outs)
      pack_tile(o.dst + (int64_t)t0 * D, o.layout, src + (int64_t)t0 * D, std::clamp(T - t0, 0, kTile), D, o.scale,
                tmp);
}

// dst rows i < nq (D values each) = column i of acc (D, 64) times scale[i] (1 without scale): O and dQ from the
// transposed accumulators, 16 x 16 blocks transposed in registers.
void store_transposed(float* dst, const float* acc, const float* scale, int nq, int D) {
  for (int i0 = 0; i0 < nq; i0 += 16) {
    const __m512 sc = scale ? _mm512_loadu_ps(scale + i0) : _mm512_set1_ps(1.0f);
    for (int d0 = 0; d0 < D; d0 += 16) {
      __m512i r[16];
      for (int d = 0; d < 16; d++)
        r[d] = _mm512_castps_si512(_mm512_mul_ps(_mm512_loadu_ps(acc + (d0 + d) * kTile + i0), sc));
      transpose16(r);
      for (int i = 0; i < 16 && i0 + i < nq; i++) _mm512_storeu_si512(dst + (int64_t)(i0 + i) * D + d0, r[i]);
    }
  }
}

// Lanes (queries q0 + c + lane) that see key `key`: 0 <= query - key < W.
inline __mmask16 visible_lanes(int q0, int c, int key, int W) {
  const __m512i d = _mm512_add_epi32(_mm512_set1_epi32(q0 + c - key),
                                     _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  return _mm512_cmplt_epu32_mask(d, _mm512_set1_epi32(W));  // unsigned: a negative distance is huge
}

// The rows of a tile (keys k0 + j) that some of the 16 queries q0 + c .. q0 + c + 15 see: [lo, hi), widened to
// even bounds (rows are rounded in pairs); the rest of the column group is 0 in P^T and dS^T.
struct Rows {
  int lo, hi;
};
inline Rows visible_rows(bool inner, int q0, int c, int k0, int W) {
  if (inner) return {0, kTile};
  const int64_t lo = std::max<int64_t>(0, (int64_t)q0 + c - W + 1 - k0), hi = std::min(kTile, q0 + c + 16 - k0);
  if (hi <= lo) return {0, 0};
  return {(int)lo / 2 * 2, (int)(hi + 1) / 2 * 2};
}

struct Args {
  int B, H, Hkv, T, Tp, D, group, ntiles;
  const int* window;
  bool amx;                                              // the tile products on AMX (else AVX-512 BF16 dot products)
  int64_t head_size() const { return (int64_t)Tp * D; }  // packed values per head
};

// Key tiles a query tile [q0, q0 + 64) visits, and whether a pair needs no mask (the fp32 kernel's rules).
inline void key_tiles(int q0, int W, int& lo, int& hi) {
  lo = std::max(0, q0 - W + 1) / kTile;
  hi = q0 / kTile;
}
inline bool interior(int q0, int k0, int W) {
  return k0 + kTile - 1 <= q0 && (int64_t)q0 + kTile - 1 - k0 < W;
}

// Per-thread scratch, fp32 unless marked.
struct Scratch {
  float* s;                            // (64, 64) S^T, then P^T
  float* dp;                           // (64, 64) dP^T (backward)
  float* acc;                          // (D, 64) O^T (forward), dQ^T (backward)
  float *m, *l, *alpha, *lse, *delta;  // (64) per query
  uint16_t* p16;                       // bf16 (32, 64, 2) P^T in pairs of rows (forward); (64, 64) P^T rows (backward)
  uint16_t* ds16;                      // bf16 (64, 64) dS^T rows
  uint16_t* dsp16;                     // bf16 (32, 64, 2) dS^T in pairs of rows
  uint16_t* q_tile;                    // bf16 (D/2, 64, 2) the forward's query tile as B over d
  uint16_t* tmp;                       // bf16 (64, D) pack_tile's scratch
  static size_t floats(int D) {
    return 2 * kTile * kTile + (size_t)D * kTile + 5 * kTile + 3 * kTile * kTile / 2 + (size_t)D * kTile;
  }
  Scratch(float* base, int D) {
    s = base, dp = s + kTile * kTile, acc = dp + kTile * kTile;
    m = acc + (size_t)D * kTile, l = m + kTile, alpha = l + kTile, lse = alpha + kTile, delta = lse + kTile;
    p16 = (uint16_t*)(delta + kTile), ds16 = p16 + kTile * kTile, dsp16 = ds16 + kTile * kTile;
    q_tile = dsp16 + kTile * kTile, tmp = q_tile + (size_t)D * kTile;
  }
};
// Grown once per calling thread, split among the OpenMP threads (16 KB apart, on page boundaries).
float* thread_scratch(int D, int nthreads, size_t& per_thread) {
  thread_local Buffer<float> buf;
  per_thread = (Scratch::floats(D) + 1023) / 1024 * 1024 + 4096;
  if (buf.size < per_thread * nthreads) buf.resize(per_thread * nthreads);
  return buf.data;
}

// ---------------------------------------------------------------------------------------------------------------
// Forward.

// Online softmax with one key tile: s (64 keys, 64 queries) holds S^T; m, l, alpha updated per query; P~^T =
// exp(S^T - m_new) (0 where masked) into p16 in pairs of rows. Returns whether some query's max rose (else every
// alpha is 1).
bool softmax_tile(Scratch& ts, bool inner, int q0, int k0, int W) {
  const __m512i zero_pair = _mm512_setzero_si512();
  bool rose = false;
  for (int c = 0; c < kTile; c += 16) {
    const Rows rows = visible_rows(inner, q0, c, k0, W);
    const __m512 masked = _mm512_set1_ps(kMasked);
    __m512 mx[4] = {masked, masked, masked, masked};  // 4 chains: a max waits 4 cycles for the one before
    for (int j = rows.lo; j < rows.hi; j++) {
      float* row = ts.s + j * kTile + c;
      __m512 x = _mm512_loadu_ps(row);
      if (!inner) {
        x = _mm512_mask_mov_ps(masked, visible_lanes(q0, c, k0 + j, W), x);
        _mm512_storeu_ps(row, x);
      }
      mx[j % 4] = _mm512_max_ps(mx[j % 4], x);
    }
    const __m512 m_old = _mm512_loadu_ps(ts.m + c),
                 m_new = _mm512_max_ps(m_old, _mm512_max_ps(_mm512_max_ps(mx[0], mx[1]), _mm512_max_ps(mx[2], mx[3])));
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < kTile; j += 2) {
      uint16_t* pair_row = ts.p16 + (j / 2) * 2 * kTile + 2 * c;
      if (j < rows.lo || j >= rows.hi) {  // no lane sees either row
        _mm512_storeu_si512(pair_row, zero_pair);
        continue;
      }
      const __m512 e0 = cpu::vexp_short_vec(_mm512_sub_ps(_mm512_loadu_ps(ts.s + j * kTile + c), m_new));
      const __m512 e1 = cpu::vexp_short_vec(_mm512_sub_ps(_mm512_loadu_ps(ts.s + (j + 1) * kTile + c), m_new));
      sum = _mm512_add_ps(sum, _mm512_add_ps(e0, e1));
      _mm512_storeu_si512(pair_row, round_pair(e0, e1));
    }
    rose |= _mm512_cmp_ps_mask(m_new, m_old, _CMP_GT_OQ) != 0;
    const __m512 alpha = cpu::vexp_masked_le_vec<Vec16>(_mm512_sub_ps(m_old, m_new));
    _mm512_storeu_ps(ts.l + c, _mm512_fmadd_ps(alpha, _mm512_loadu_ps(ts.l + c), sum));
    _mm512_storeu_ps(ts.m + c, m_new);
    _mm512_storeu_ps(ts.alpha + c, alpha);
  }
  return rose;
}

// Query tile qt of head h in batch b: out and lse rows. Its queries (q, fp32) are rounded here, once: no other
// task reads them.
void forward_task(const Args& a, float* out, float* lse, const uint16_t* kA, const uint16_t* vT, const float* q, int b,
                  int h, int qt, Scratch& ts, Work& work) {
  const int D = a.D, T = a.T, W = a.window[h], q0 = qt * kTile, nq = std::min(kTile, T - q0);
  const int64_t kv = (int64_t)b * a.Hkv + h / a.group, bh = (int64_t)b * a.H + h;
  const uint16_t* k_rows = kA + kv * a.head_size();
  const uint16_t* v_cols = vT + kv * a.head_size();
  pack_tile(ts.q_tile, Layout::pairs_of_d, q + (bh * T + q0) * D, nq, D, 1.0f / std::sqrt((float)D), ts.tmp);
  for (int i = 0; i < kTile; i++) ts.m[i] = kNegBig, ts.l[i] = 0;
  int lo, hi;
  key_tiles(q0, W, lo, hi);
  for (int kt = lo; kt <= hi; kt++) {
    const int k0 = kt * kTile;
    const bool inner = interior(q0, k0, W);
    const TileBand band{q0, k0, W, inner};
    const uint64_t qk = scores_product(a.amx, ts.s, k_rows + (int64_t)k0 * D, D, ts.q_tile, D, band);
    work.computed += qk / D, work.macs += qk;
    const bool rose = softmax_tile(ts, inner, q0, k0, W);
    // O^T = diag(alpha) O^T, per query (column), where some alpha is not 1; the first tile sets O^T
    for (int d = 0; d < D && kt > lo && rose; d++)
      for (int c = 0; c < kTile; c += 16) {
        float* p = ts.acc + d * kTile + c;
        _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_loadu_ps(p), _mm512_loadu_ps(ts.alpha + c)));
      }
    work.macs += sum_product(a.amx, kt > lo, ts.acc, kTile, v_cols + (int64_t)k0 * D, kTile, ts.p16, 2 * kTile, D,
                             kTile, [&](int, int j, int k) { return band.visible(j, k); });
  }
  float* lse_row = lse + bh * T + q0;
  for (int c = 0; c < kTile; c += 16) {
    const __m512 l = _mm512_loadu_ps(ts.l + c);
    _mm512_storeu_ps(ts.alpha + c, _mm512_div_ps(_mm512_set1_ps(1.0f), l));  // alpha's last use: the last rescale
    const __mmask16 rows = nq - c >= 16 ? 0xffff : nq <= c ? 0 : (1u << (nq - c)) - 1;
    _mm512_mask_storeu_ps(lse_row + c, rows, _mm512_add_ps(_mm512_loadu_ps(ts.m + c), cpu::vlog_vec(l)));
  }
  store_transposed(out + (bh * T + q0) * D, ts.acc, ts.alpha, nq, D);
  work.visited += hi - lo + 1;
}

// ---------------------------------------------------------------------------------------------------------------
// Backward.

// From S^T (ts.s) and dP^T (ts.dp): P^T = exp(S^T - lse) (0 where masked) as bf16 rows into p16, and dS^T / sqrt(D)
// = P^T scale (dP^T - Delta) as bf16 rows into ds16 and in pairs of rows into dsp16.
void gradient_tile(Scratch& ts, bool inner, int q0, int k0, int W, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int c = 0; c < kTile; c += 16) {
    const Rows rows = visible_rows(inner, q0, c, k0, W);
    const __m512 lse = _mm512_loadu_ps(ts.lse + c), delta = _mm512_loadu_ps(ts.delta + c);
    __m512 ds_prev = _mm512_setzero_ps();
    for (int j = 0; j < kTile; j++) {
      __m512 p = _mm512_setzero_ps(), ds = p;
      if (j >= rows.lo && j < rows.hi) {
        p = cpu::vexp_short_vec(_mm512_sub_ps(_mm512_loadu_ps(ts.s + j * kTile + c), lse));
        ds = _mm512_mul_ps(_mm512_mul_ps(p, sc), _mm512_sub_ps(_mm512_loadu_ps(ts.dp + j * kTile + c), delta));
        if (!inner) {  // a skipped block's S^T and dP^T are stale (TileBand): both masked
          const __mmask16 vis = visible_lanes(q0, c, k0 + j, W);
          p = _mm512_maskz_mov_ps(vis, p), ds = _mm512_maskz_mov_ps(vis, ds);
        }
      }
      store_rounded(ts.p16 + j * kTile + c, p);
      store_rounded(ts.ds16 + j * kTile + c, ds);
      if (j % 2 == 1) _mm512_storeu_si512(ts.dsp16 + (j / 2) * 2 * kTile + 2 * c, round_pair(ds_prev, ds));
      ds_prev = ds;
    }
  }
}

// Grows b to at least n values (its contents are then zero).
template <class U>
void grow(Buffer<U>& b, size_t n) {
  if (b.size < n) b.resize(n);
}

// One key/value head's operands as the backward's products read them, and Delta of one query head: packed by the
// task that uses them, into its thread's buffers (grown once), so that the products find them in this core's cache.
struct HeadPacks {
  Buffer<uint16_t> kA, vA, kT;  // the key/value head: K and V as A, K^T as A
  Buffer<uint16_t> qB, oB;      // the query head: Q / sqrt(D) and dO as B over d
  Buffer<uint16_t> qP, oP;      // Q and dO as B over t
  Buffer<float> delta;          // (T) rowsum(dO * O), fp32
  void grow_to(int64_t head_size, int T) {
    for (Buffer<uint16_t>* b : {&kA, &vA, &kT, &qB, &oB, &qP, &oP}) grow(*b, head_size);
    grow(delta, T);
  }
};
HeadPacks& head_packs() {
  thread_local HeadPacks p;
  return p;
}

// The backward's inputs, fp32 as the model holds them.
struct BackwardInputs {
  const float *q, *k, *v, *dout, *out, *lse;
};

// Key/value head hk of batch b: dK, dV of its keys and dQ of its query heads.
// dK, dV rows of kv head kv start at dk + kv * kv_stride (dv alike). A key tile's first pair (its diagonal one, of
// the group's first head) sets its rows, a query tile's first pair its dQ^T: no zeroing.
void backward_task(const Args& a, float* dq, float* dk, float* dv, int64_t kv_stride, const BackwardInputs& in, int b,
                   int hk, Scratch& ts, float scale, Work& work) {
  const int D = a.D, T = a.T;
  const int64_t kv = (int64_t)b * a.Hkv + hk;
  float* dk_rows = dk + kv * kv_stride;
  float* dv_rows = dv + kv * kv_stride;
  HeadPacks& hp = head_packs();
  hp.grow_to(a.head_size(), T);
  pack_head(in.k + kv * T * D, T, a.Tp, D, {{hp.kA.data, Layout::rows, 1.0f}, {hp.kT.data, Layout::cols, 1.0f}},
            ts.tmp);
  pack_head(in.v + kv * T * D, T, a.Tp, D, {{hp.vA.data, Layout::rows, 1.0f}}, ts.tmp);
  for (int h = hk * a.group; h < (hk + 1) * a.group; h++) {
    const int64_t bh = (int64_t)b * a.H + h;
    const int W = a.window[h];
    const float* dout = in.dout + bh * T * D;
    pack_head(in.q + bh * T * D, T, a.Tp, D,
              {{hp.qB.data, Layout::pairs_of_d, scale}, {hp.qP.data, Layout::pairs_of_t, 1.0f}}, ts.tmp);
    pack_head(dout, T, a.Tp, D, {{hp.oB.data, Layout::pairs_of_d, 1.0f}, {hp.oP.data, Layout::pairs_of_t, 1.0f}},
              ts.tmp);
    const float* out = in.out + bh * T * D;
    for (int t = 0; t < T; t++) {  // Delta = rowsum(dO * O) in fp32
      __m512 acc = _mm512_setzero_ps();
      for (int d = 0; d < D; d += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(dout + t * D + d), _mm512_loadu_ps(out + t * D + d), acc);
      hp.delta.data[t] = _mm512_reduce_add_ps(acc);
    }
    for (int qt = 0; qt < a.ntiles; qt++) {
      const int q0 = qt * kTile, nq = std::min(kTile, T - q0);
      for (int i = 0; i < kTile; i++) {
        ts.lse[i] = i < nq ? in.lse[bh * T + q0 + i] : -kMasked;  // padding queries get P = 0
        ts.delta[i] = i < nq ? hp.delta.data[q0 + i] : 0.0f;
      }
      int lo, hi;
      key_tiles(q0, W, lo, hi);
      for (int kt = lo; kt <= hi; kt++) {
        const int k0 = kt * kTile;
        const bool first_dkdv = h == hk * a.group && kt == qt, first_dq = kt == lo;
        const bool inner = interior(q0, k0, W);
        const TileBand band{q0, k0, W, inner};
        const uint64_t qk =
            scores_product(a.amx, ts.s, hp.kA.data + (int64_t)k0 * D, D, hp.qB.data + (int64_t)q0 * D, D, band);
        work.computed += qk / D, work.macs += qk;
        work.macs +=
            scores_product(a.amx, ts.dp, hp.vA.data + (int64_t)k0 * D, D, hp.oB.data + (int64_t)q0 * D, D, band);
        gradient_tile(ts, inner, q0, k0, W, scale);
        // dV += P^T dO, dK += dS^T Q (keys as rows, summed over queries), dQ^T += K^T dS^T (summed over keys)
        const auto over_queries = [&](int i, int, int k) { return band.visible(k, i); };
        work.macs += sum_product(a.amx, !first_dkdv, dv_rows + (int64_t)k0 * D, D, ts.p16, kTile,
                                 hp.oP.data + (int64_t)q0 * D, 2 * D, kTile, D, over_queries);
        work.macs += sum_product(a.amx, !first_dkdv, dk_rows + (int64_t)k0 * D, D, ts.ds16, kTile,
                                 hp.qP.data + (int64_t)q0 * D, 2 * D, kTile, D, over_queries);
        work.macs += sum_product(a.amx, !first_dq, ts.acc, kTile, hp.kT.data + (int64_t)k0 * D, kTile, ts.dsp16,
                                 2 * kTile, D, kTile, [&](int, int j, int k) { return band.visible(j, k); });
      }
      work.visited += hi - lo + 1;
      store_transposed(dq + (bh * T + q0) * D, ts.acc, nullptr, nq, D);
    }
  }
}

// Runs task(t, scratch, work) for t < n over the OpenMP threads (dynamic, one task at a time), each thread with its
// own scratch (and its tile registers configured, on AMX); returns the work summed over the threads.
template <class Task>
Work run_tasks(int64_t n, int D, bool amx, const Task& task) {
  const int nthreads = omp_get_max_threads();
  size_t per_thread;
  float* scratch = thread_scratch(D, nthreads, per_thread);
  uint64_t computed = 0, visited = 0, macs = 0;
#pragma omp parallel reduction(+ : computed, visited, macs)
  {
    Scratch ts(scratch + per_thread * omp_get_thread_num(), D);
    Work work;
#ifdef AAH_AMX
    if (amx) tiles_configure();
#endif
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < n; t++) task(t, ts, work);
#ifdef AAH_AMX
    if (amx) _tile_release();
#endif
    computed += work.computed, visited += work.visited, macs += work.macs;
  }
  return {computed, visited, macs};
}

Args make_args(const int* window, int B, int H, int Hkv, int T, int D, AttnKernel kernel) {
  const int ntiles = (T + kTile - 1) / kTile;
  return {B, H, Hkv, T, ntiles * kTile, D, H / Hkv, ntiles, window, kernel == AttnKernel::amx};
}

// Tiles of the causal triangle that the windows skip (AttnCounters, as the fp32 kernel counts them).
uint64_t skipped_tiles(const Args& a) {
  uint64_t n = 0;
  for (int h = 0; h < a.H; h++)
    for (int qt = 0; qt < a.ntiles; qt++) {
      int lo, hi;
      key_tiles(qt * kTile, a.window[h], lo, hi);
      n += (uint64_t)a.B * lo;
    }
  return n;
}

struct PackBuffers {
  Buffer<uint16_t> kA, vT;  // the forward's K and V^T as A, every key/value head
  Buffer<float> dk, dv;     // the backward's dK, dV where T is not a multiple of the tile
};
PackBuffers& packs() {
  thread_local PackBuffers p;
  return p;
}

// Whether a call runs on `kernel` here: the kernel is available, its shapes (head dim a multiple of 32, no
// diagnostics), and a well-formed call. Anything else goes to the fp32 kernel, which also reports a malformed one
// (bad shape, a window below 1) with its own error.
bool takes(AttnKernel kernel, int D, const AttnDiagnostics* diag, const int* window, int B, int H, int Hkv, int T) {
  if (kernel == AttnKernel::fp32 || !attn_kernel_available(kernel) || !bf16_shape(D, diag)) return false;
  if (B < 1 || T < 1 || H < 1 || Hkv < 1 || H % Hkv != 0) return false;
  return std::all_of(window, window + H, [](int w) { return w >= 1; });
}

}  // namespace

bool attn_kernel_available(AttnKernel kernel) {
  static const std::string found = isa();
  switch (kernel) {
    case AttnKernel::fp32:
      return true;
    case AttnKernel::dot:  // AVX-512 BF16, in this build and in oneDNN's view of the CPU
      return found == "avx512_core_bf16" || found == "avx512_core_amx";
    case AttnKernel::amx:
#ifdef AAH_AMX
      return amx_permitted();
#else
      return false;
#endif
  }
  return false;
}

void attn_local_forward_on(AttnKernel kernel, float* out, float* lse, const float* q, const float* k, const float* v,
                           const int* window, int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag,
                           AttnCounters* counters) {
  if (!takes(kernel, D, diag, window, B, H, Hkv, T))
    return cpu::attn_local_forward(out, lse, q, k, v, window, B, H, Hkv, T, D, diag, counters);
  const Args a = make_args(window, B, H, Hkv, T, D, kernel);
  PackBuffers& pk = packs();
  const size_t kv_size = (size_t)B * Hkv * a.head_size();
  grow(pk.kA, kv_size), grow(pk.vT, kv_size);
  const int nkv = B * Hkv;  // K and V of every key/value head (read by every query tile that sees them)
#pragma omp parallel for schedule(static)
  for (int i = 0; i < 2 * nkv; i++) {
    const int64_t kv = i % nkv;
    thread_local Buffer<uint16_t> tmp;
    grow(tmp, (size_t)kTile * D);
    if (i < nkv)
      pack_head(k + kv * T * D, T, a.Tp, D, {{pk.kA.data + kv * a.head_size(), Layout::rows, 1.0f}}, tmp.data);
    else
      pack_head(v + kv * T * D, T, a.Tp, D, {{pk.vT.data + kv * a.head_size(), Layout::cols, 1.0f}}, tmp.data);
  }
  const int64_t nbh = (int64_t)B * H;
  // latest query tiles first: they visit the most key tiles
  const Work w = run_tasks(nbh * a.ntiles, D, a.amx, [&](int64_t t, Scratch& ts, Work& work) {
    const int64_t bh = t % nbh;
    const int qt = a.ntiles - 1 - (int)(t / nbh);
    forward_task(a, out, lse, pk.kA.data, pk.vT.data, q, (int)(bh / H), (int)(bh % H), qt, ts, work);
  });
  if (counters) {
    for (int h = 0; h < H; h++) counters->fwd_pairs += (uint64_t)B * attn_visible_pairs(T, window[h]);
    counters->fwd_pairs_computed += w.computed;
    counters->fwd_tiles_visited += w.visited;
    counters->fwd_tiles_skipped += skipped_tiles(a);
    counters->macs += w.macs;
  }
}

void attn_local_backward_on(AttnKernel kernel, float* dq, float* dk, float* dv, const float* dout, const float* out,
                            const float* lse, const float* q, const float* k, const float* v, const int* window, int B,
                            int H, int Hkv, int T, int D, AttnCounters* counters) {
  if (!takes(kernel, D, nullptr, window, B, H, Hkv, T))
    return cpu::attn_local_backward(dq, dk, dv, dout, out, lse, q, k, v, window, B, H, Hkv, T, D, counters);
  const Args a = make_args(window, B, H, Hkv, T, D, kernel);
  PackBuffers& pk = packs();
  const bool padded = a.Tp != T;  // dK, dV rows past T need a home
  if (padded) grow(pk.dk, (size_t)B * Hkv * a.head_size()), grow(pk.dv, (size_t)B * Hkv * a.head_size());
  const float scale = 1.0f / std::sqrt((float)D);
  const BackwardInputs in{q, k, v, dout, out, lse};
  const int nkv = B * Hkv;
  const Work w = run_tasks(nkv, D, a.amx, [&](int64_t t, Scratch& ts, Work& work) {
    backward_task(a, dq, padded ? pk.dk.data : dk, padded ? pk.dv.data : dv, a.head_size(), in, (int)t / Hkv,
                  (int)t % Hkv, ts, scale, work);
  });
  // dK, dV: where T is not a multiple of the tile, the first T rows of each head's padded accumulators
  if (padded) {
#pragma omp parallel for schedule(static)
    for (int kv = 0; kv < nkv; kv++) {
      std::memcpy(dk + (int64_t)kv * T * D, pk.dk.data + kv * a.head_size(), sizeof(float) * T * D);
      std::memcpy(dv + (int64_t)kv * T * D, pk.dv.data + kv * a.head_size(), sizeof(float) * T * D);
    }
  }
  if (counters) {
    for (int h = 0; h < H; h++) counters->bwd_pairs += (uint64_t)B * attn_visible_pairs(T, window[h]);
    counters->bwd_pairs_computed += w.computed;
    counters->bwd_tiles_visited += w.visited;
    counters->bwd_tiles_skipped += skipped_tiles(a);
    counters->macs += w.macs;
  }
}

AAH_AVX512_WARNINGS_ON

#else  // no AVX-512 BF16 in this build: the fp32 kernel

bool attn_kernel_available(AttnKernel kernel) {
  return kernel == AttnKernel::fp32;
}
void attn_local_forward_on(AttnKernel, float* out, float* lse, const float* q, const float* k, const float* v,
                           const int* window, int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag,
                           AttnCounters* counters) {
  cpu::attn_local_forward(out, lse, q, k, v, window, B, H, Hkv, T, D, diag, counters);
}
void attn_local_backward_on(AttnKernel, float* dq, float* dk, float* dv, const float* dout, const float* out,
                            const float* lse, const float* q, const float* k, const float* v, const int* window, int B,
                            int H, int Hkv, int T, int D, AttnCounters* counters) {
  cpu::attn_local_backward(dq, dk, dv, dout, out, lse, q, k, v, window, B, H, Hkv, T, D, counters);
}

#endif

AttnKernel attn_kernel(int D, const AttnDiagnostics* diag) {
  if (!bf16_shape(D, diag)) return AttnKernel::fp32;
  for (AttnKernel k : {AttnKernel::amx, AttnKernel::dot})
    if (attn_kernel_available(k)) return k;
  return AttnKernel::fp32;
}
const char* attn_kernel_name(AttnKernel kernel) {
  switch (kernel) {
    case AttnKernel::amx:
      return "amx";
    case AttnKernel::dot:
      return "avx512_bf16";
    case AttnKernel::fp32:
      break;
  }
  return "fp32";
}
const char* attn_kernel_how(AttnKernel kernel) {
  switch (kernel) {
    case AttnKernel::amx:
      return "on AMX tiles";
    case AttnKernel::dot:
      return "with AVX-512 BF16 dot products";
    case AttnKernel::fp32:
      break;
  }
  return "in fp32";
}
void attn_local_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int* window,
                        int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag, AttnCounters* counters) {
  attn_local_forward_on(attn_kernel(D, diag), out, lse, q, k, v, window, B, H, Hkv, T, D, diag, counters);
}
void attn_local_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                         const float* q, const float* k, const float* v, const int* window, int B, int H, int Hkv,
                         int T, int D, AttnCounters* counters) {
  attn_local_backward_on(attn_kernel(D), dq, dk, dv, dout, out, lse, q, k, v, window, B, H, Hkv, T, D, counters);
}

}  // namespace aah::bf16
