// Fast causal attention with one window per head (FlashAttention-2 on the CPU): forward and backward, tiled,
// online softmax, fp32 accumulation, OpenMP over (batch, head, tile). Work follows the windows: a query tile
// visits only the key tiles that intersect [i - W_h + 1, i], and only boundary tiles apply the element mask.
//
// Shapes: B batch, H query heads, Hkv key/value heads (query head h reads kv head h / (H / Hkv)), T positions,
// D head dim; BQ query rows and BK keys per tile.
//   q, out, dout, dq (B, H, T, D)   k, v, dk, dv (B, Hkv, T, D)   lse (B, H, T)   window (H)
// Per-thread tile scratch (grown once, reused by every call):
//   qt, dot (D, BQ)   query tile (times 1/sqrt(D)) and dout tile, transposed: column i is query row q0 + i
//   st, dpt (BK, BQ)  scores S^T / probabilities P^T, and dP^T / dS^T of the current (query tile, key tile)
//                     (row stride kLd = BQ + 8)
//   stats (10, BQ)    per-query running max, sum, rescale factor, lse, Delta, diagnostic accumulators, and the
//                     score tile's column maxima over even and odd rows (forward, interior tiles)
// Per-call scratch: Delta = rowsum(dout * out) (B, H, T) in the backward; diagnostic partial sums per task.
//
// Why transposed scores: with keys as rows and queries as columns, every per-query quantity (running max,
// sum, lse, Delta) is a vector over 8 consecutive queries, so the softmax needs no horizontal reductions, and
// all six tile products are one register-blocked kernel C = A B with A read by broadcasts and B by rows
// (tile_gemm in kernels/cpu/tile_gemm.h).
//
// Counters: pairs_computed counts score elements computed (whole micro-blocks of visited tiles, padding columns
// included), tiles_visited counts tile-pair visits as executed (the per_tile backward visits each pair twice),
// tiles_skipped the tiles of the causal triangle that the windows skip, macs the multiply-adds executed.
//
// Determinism: every output element is produced by one task, as a fixed chain of FMAs (over d, then over keys
// or queries in ascending tile order), so results do not depend on the number of threads or on the schedule.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/arena.h"
#include "core/check.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/tile_gemm.h"
#include "kernels/cpu/vexp.h"
#include "kernels/ops.h"

namespace aah::cpu {
namespace {

// Tile sizes: 48, 64 and 96 measured alike on this machine; 64 keeps the boundary waste of small windows low.
constexpr int kBQ = 64;  // query rows per tile (a multiple of 8: columns of the score tile are 8-wide vectors)
constexpr int kBK = 64;  // keys per tile
static_assert(kBQ == kBK, "the backward takes a key tile's diagonal pair (query tile kt) as its first");
// Row stride of the transposed tiles (qt, dot, st, dpt): BQ + 8, so that walking down a column (the PV and dQ
// products do) does not map every row to the same few L1 sets.
constexpr int kLd = kBQ + 8;
// Masked scores are kMasked, finite so that e * (s - m) stays 0 rather than 0 * inf; the running max starts at
// kNegBig > kMasked, so that a row that has seen only masked keys keeps e = exp(kMasked - kNegBig) = 0.
constexpr float kMasked = -1e30f;
constexpr float kNegBig = -1e20f;

AttnBackwardSchedule g_backward_schedule = AttnBackwardSchedule::automatic;
bool g_poison_scratch = false;
#ifdef AAH_AVX2
bool g_fused_epilogues = true;
#else
bool g_fused_epilogues = false;  // epilogues run in the vector micro-kernels only (tile_gemm.h)
#endif
// Boundary tiles can fuse their masking into the score products' epilogues too, where every block of every tile
// product is 8 rows high and starts at a multiple of 8 (tile_gemm.h with AVX-512): then a block of a later product
// (dV, dK: 8 keys; dQ, PV: 8 queries, inside one 16-column group) reads only score entries of blocks that hold a
// visible pair, which the band computes and the epilogue masks. AVX2's 6-row blocks can straddle two column groups
// and read blocks the band skipped, so they mask and zero in passes of their own.
#ifdef AAH_AVX512
constexpr bool kAttnFusedBoundary = true;
#else
constexpr bool kAttnFusedBoundary = false;
#endif

// ---------------------------------------------------------------------------------------------------------------
// Band ranges: the k range a block of a boundary tile's product needs (tile_gemm.h), so that the parts of a tile
// that no visible pair touches are not computed.

// Score blocks: rows are keys k0 + r, columns queries q0 + c, k runs over d. All or nothing.
struct AttnScoreRange {
  int q0, k0, W, K;
  TileRange operator()(int r0, int r1, int c0, int c1) const {
    const int64_t dmax = (int64_t)q0 + c1 - 1 - (k0 + r0), dmin = (int64_t)q0 + c0 - (k0 + r1 - 1);
    return dmax >= 0 && dmin < W ? TileRange{0, K} : TileRange{0, 0};
  }
};
// Rows are queries q0 + r, k runs over the keys k0 + k they can see (k < nk).
struct AttnQueryRowRange {
  int q0, k0, W, nk;
  TileRange operator()(int r0, int r1, int, int) const {
    return {(int)std::max<int64_t>(0, (int64_t)q0 + r0 - W + 1 - k0), std::min(nk, q0 + r1 - k0)};
  }
};
// Rows are keys k0 + r, k runs over the queries q0 + k that see them (k < nq).
struct AttnKeyRowRange {
  int q0, k0, W, nq;
  TileRange operator()(int r0, int r1, int, int) const {
    return {std::max(0, k0 + r0 - q0), (int)std::min<int64_t>(nq, (int64_t)k0 + r1 + W - 1 - q0)};
  }
};

// Interior tiles take the full range, boundary tiles the band range.
template <int MODE, class Band>
inline uint64_t attn_gemm_tile(bool interior, int M, int N, int K, const float* A, int64_t rsa, int64_t ksa,
                               const float* Bm, int64_t ldb, float* C, int64_t ldc, const float* rs,
                               const Band& band) {
  if (interior) return tile_gemm<MODE>(M, N, A, rsa, ksa, Bm, ldb, C, ldc, rs, TileFullRange{K});
  return tile_gemm<MODE>(M, N, A, rsa, ksa, Bm, ldb, C, ldc, rs, band);
}
// An accumulating product (MODE kAdd or kScaleAdd) whose C holds nothing yet when `first`: then C = A B (kInit,
// which also zeroes the blocks the band skips), so that C needs no memset before its first tile. Same bits as
// zeroing C and accumulating: each chain starts from +0 either way.
template <int MODE, class Band>
inline uint64_t attn_gemm_tile_acc(bool first, bool interior, int M, int N, int K, const float* A, int64_t rsa,
                                   int64_t ksa, const float* Bm, int64_t ldb, float* C, int64_t ldc,
                                   const float* rs, const Band& band) {
  if (first) return attn_gemm_tile<kInit>(interior, M, N, K, A, rsa, ksa, Bm, ldb, C, ldc, rs, band);
  return attn_gemm_tile<MODE>(interior, M, N, K, A, rsa, ksa, Bm, ldb, C, ldc, rs, band);
}

// Prefetches into L1 of what the next task of a thread reads first from memory (the next query tile's Q rows, the
// key tile it adds, ...), a share before each of this task's key-tile visits, so that the loads overlap its
// arithmetic: the forward and the per-head backward (T = 4096, D >= 64, W = 64: 4-12% faster; the per-tile
// backward's passes measured alike with and without). In the forward a visit's share goes out a few lines at a time
// from its score product (drip(), called by the product's epilogue once per block): issued all at once, its several
// hundred prefetches stalled the core (perf put 8% of the forward's samples on them at T = 4096, W = 64); dripped,
// that forward is 6-8% faster. The per-head backward dripped the same way measured alike, so it issues each share at
// once. docs/attention-kernel.md. No effect on the results.
class AttnPrefetch {
 public:
  // rows [row, row + n) of a (.., D) array
  void add(const float* base, int64_t row, int64_t n, int D) {
    if (n <= 0) return;
    AAH_CHECK(n_ < kRegions, "AttnPrefetch: more than ", kRegions, " regions");
    start_[n_] = (const char*)(base + row * D), lines_[n_] = (n * D * (int64_t)sizeof(float) + kLine - 1) / kLine;
    total_ += lines_[n_++];
  }
  // Visit `visit` of `visits` begins: its share of the lines is issued by drip() and finish_visit().
  void start_visit(int visit, int visits) {
    until_ = total_ * (visit + 1) / visits;
    per_drip_ = (until_ - done_ + kDrips - 1) / kDrips;
  }
  // 1 / kDrips of the visit's share: a boundary tile's score product has 8-10 blocks and an interior one 16, so the
  // share is out before the product ends.
  void drip() { issue_until(std::min(until_, done_ + per_drip_)); }
  // What is left of the visit's share.
  void finish_visit() { issue_until(until_); }

 private:
  void issue_until(int64_t until) {
    for (; done_ < until; done_++) {
      while (done_ - before_ >= lines_[r_]) before_ += lines_[r_++];
      __builtin_prefetch(start_[r_] + (done_ - before_) * kLine, 0, 3);
    }
  }
  static constexpr int kLine = 64, kRegions = 4, kDrips = 6;  // bytes per cache line; regions at most; drips a visit
  const char* start_[kRegions] = {};
  int64_t lines_[kRegions] = {};
  int n_ = 0, r_ = 0;                          // regions added; the region of line done_
  int64_t total_ = 0, done_ = 0, before_ = 0;  // lines in all, issued, and in the regions before r_
  int64_t until_ = 0, per_drip_ = 0;           // the current visit's last line (exclusive), lines per drip()
};

// ---------------------------------------------------------------------------------------------------------------
// Epilogues of the score products of interior tiles (tile_gemm.h): the softmax passes that read a score once are
// done on the product's registers instead, with the same operations in the same order, so the bits do not change.
// Rows are keys, columns queries; a block's first row r is even (blocks of 6 or 8 rows).

#ifdef AAH_AVX2
// Forward: the running column maxima of attn_softmax_cols, even rows into mx0 and odd rows into mx1.
// Also issues a share of the thread's prefetches (AttnPrefetch::drip).
struct AttnColMaxEpilogue {
  float *mx0, *mx1;
  AttnPrefetch* prefetch;
  template <class V, int MR, int NV>
  void apply(typename V::T (&acc)[MR][NV], int, int c) const {
    prefetch->drip();
    for (int v = 0; v < NV; v++) {
      float* p0 = mx0 + c + V::kWidth * v;
      float* p1 = mx1 + c + V::kWidth * v;
      typename V::T m0 = V::load(p0), m1 = V::load(p1);
      for (int i = 0; i + 1 < MR; i += 2) m0 = V::max(m0, acc[i][v]), m1 = V::max(m1, acc[i + 1][v]);
      if constexpr (MR % 2 == 1) m0 = V::max(m0, acc[MR - 1][v]);
      V::store(p0, m0);
      V::store(p1, m1);
    }
  }
};
// Backward, S^T = K Qt: P^T = exp(S^T - lse), as attn_bwd_ds_cols.
struct AttnProbEpilogue {
  const float* lse;
  template <class V, int MR, int NV>
  void apply(typename V::T (&acc)[MR][NV], int, int c) const {
    for (int v = 0; v < NV; v++) {
      const typename V::T l = V::load(lse + c + V::kWidth * v);
      for (int i = 0; i < MR; i++) acc[i][v] = vexp_masked_le_vec<V>(V::sub(acc[i][v], l));
    }
  }
};
// Visibility of 8 or 16 lanes whose query - key distances are d0 + lane: p where 0 <= d0 + lane < W, else other.
inline __m256 attn_where_visible(__m256 p, int d0, int W, float other) {
  const __m256i d = _mm256_add_epi32(_mm256_set1_epi32(d0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i vis = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), d),
                                          _mm256_cmpgt_epi32(_mm256_set1_epi32(W), d));
  return _mm256_blendv_ps(_mm256_set1_ps(other), p, _mm256_castsi256_ps(vis));
}
#ifdef AAH_AVX512
inline __m512 attn_where_visible(__m512 p, int d0, int W, float other) {
  const __m512i d = _mm512_add_epi32(_mm512_set1_epi32(d0), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                                               12, 13, 14, 15));
  // unsigned compare: a negative distance is huge
  return _mm512_mask_mov_ps(_mm512_set1_ps(other), _mm512_cmplt_epu32_mask(d, _mm512_set1_epi32(W)), p);
}
#endif
// Forward, boundary tiles (kAttnFusedBoundary): as AttnColMaxEpilogue, after setting the scores the query (q0 +
// column) cannot see (key k0 + row) to kMasked, as attn_mask_rows does.
struct AttnColMaxMaskedEpilogue {
  float *mx0, *mx1;
  int q0, k0, W;
  AttnPrefetch* prefetch;
  template <class V, int MR, int NV>
  void apply(typename V::T (&acc)[MR][NV], int r, int c) const {
    for (int v = 0; v < NV; v++) {
      const int d0 = q0 + c + V::kWidth * v - (k0 + r);
      for (int i = 0; i < MR; i++) acc[i][v] = attn_where_visible(acc[i][v], d0 - i, W, kMasked);
    }
    AttnColMaxEpilogue{mx0, mx1, prefetch}.apply<V, MR, NV>(acc, r, c);
  }
};
// Backward, boundary tiles: as AttnProbEpilogue, and 0 where the query (q0 + column) does not see the key (k0 + row).
struct AttnProbMaskedEpilogue {
  const float* lse;
  int q0, k0, W;
  template <class V, int MR, int NV>
  void apply(typename V::T (&acc)[MR][NV], int r, int c) const {
    for (int v = 0; v < NV; v++) {
      const typename V::T l = V::load(lse + c + V::kWidth * v);
      const int d0 = q0 + c + V::kWidth * v - (k0 + r);
      for (int i = 0; i < MR; i++)
        acc[i][v] = attn_where_visible(vexp_masked_le_vec<V>(V::sub(acc[i][v], l)), d0 - i, W, 0.0f);
    }
  }
};
// Backward, dP^T = V dOt: dS^T / sqrt(D) = (P^T scale) (dP^T - Delta), P^T read from pt (the product above).
struct AttnDsEpilogue {
  const float *pt, *delta;
  float scale;
  template <class V, int MR, int NV>
  void apply(typename V::T (&acc)[MR][NV], int r, int c) const {
    const typename V::T sc = V::set1(scale);
    for (int v = 0; v < NV; v++) {
      const typename V::T dl = V::load(delta + c + V::kWidth * v);
      for (int i = 0; i < MR; i++) {
        const typename V::T p = V::load(pt + (r + i) * kLd + c + V::kWidth * v);
        acc[i][v] = V::mul(V::mul(p, sc), V::sub(acc[i][v], dl));
      }
    }
  }
};
#endif

// ---------------------------------------------------------------------------------------------------------------
// Tile bookkeeping.

inline int64_t attn_row(int b, int h, int t, int Hn, int T) { return ((int64_t)b * Hn + h) * T + t; }

// Key tiles a query tile [q0, q0 + nq) visits: those intersecting [q0 - W + 1, q0 + nq - 1].
inline void attn_key_tiles(int q0, int nq, int W, int& kt_lo, int& kt_hi) {
  kt_lo = std::max(0, q0 - W + 1) / kBK;
  kt_hi = (q0 + nq - 1) / kBK;
}
// Query tiles that see key tile [k0, k0 + nk): those intersecting [k0, k0 + nk - 1 + W - 1]. The same tile pairs
// as attn_key_tiles (both are "the tile pair holds at least one visible element").
inline void attn_query_tiles(int k0, int nk, int W, int T, int& qt_lo, int& qt_hi) {
  qt_lo = k0 / kBQ;
  qt_hi = (int)(std::min<int64_t>(T - 1, (int64_t)k0 + nk - 2 + W) / kBQ);
}
// A tile pair with every element visible needs no mask.
inline bool attn_tile_interior(int q0, int nq, int k0, int nk, int W) {
  return k0 + nk - 1 <= q0 && (int64_t)q0 + nq - 1 - k0 < W;
}

// Rows of a key tile that the 8 queries q0 + c .. q0 + c + 7 can see, all of them in interior tiles: [lo, hi).
inline TileRange attn_vec_keys(bool interior, int q0, int c, int k0, int nk, int W) {
  if (interior) return {0, nk};
  const int lo = (int)std::min<int64_t>(nk, std::max<int64_t>(0, (int64_t)q0 + c - W + 1 - k0));
  return {lo, std::max(lo, std::min(nk, q0 + c + 8 - k0))};
}

// Boundary tiles: st (nk, ld) rows lo .. hi-1 of columns c .. c+7 (queries q0 + c + lane, keys k0 + j) get kMasked
// where the key is not visible (attn_visible: 0 <= query - key < W).
inline void attn_mask_rows(float* st, TileRange rows, int c, int q0, int k0, int W) {
  auto mask_row = [&](int j) {
    float* row = st + j * kLd + c;
#ifdef AAH_AVX2
    // distance query - key of lane 0 is q0 + c - (k0 + j); lanes add 0..7
    _mm256_storeu_ps(row, attn_where_visible(_mm256_loadu_ps(row), q0 + c - (k0 + j), W, kMasked));
#else
    for (int i = 0; i < 8; i++) row[i] = attn_visible(q0 + c + i, k0 + j, W) ? row[i] : kMasked;
#endif
  };
  // Every lane sees row j when 0 <= d0 and d0 + 7 < W, i.e. far <= j <= near: those rows need no mask. Only the
  // rows before `far` (the window's far edge) and after `near` (the diagonal) are visited: a few at each edge,
  // instead of every row of `rows`.
  const int near = q0 + c - k0, far = (int)std::max<int64_t>(INT32_MIN, (int64_t)near + 8 - W);
  const int far_end = std::min(rows.hi, far);
  for (int j = rows.lo; j < far_end; j++) mask_row(j);
  for (int j = std::max({rows.lo, far_end, near + 1}); j < rows.hi; j++) mask_row(j);
}

// Boundary tiles: rows of an 8-column group outside its visible rows `rg` are set to 0 where a later product can
// read them. Band blocks of up to kTileMaxBlockRows rows read at most that many rows past rg on either side
// (tile_gemm.h); rows further out are never read, so they keep whatever they hold.
inline void attn_zero_margin(float* t, TileRange rg, int nk, int c) {
  const int lo = std::max(0, rg.lo - kTileMaxBlockRows), hi = std::min(nk, rg.hi + kTileMaxBlockRows);
  for (int j = lo; j < rg.lo; j++)
    for (int i = 0; i < 8; i++) t[j * kLd + c + i] = 0.0f;
  for (int j = std::max(rg.hi, lo); j < hi; j++)
    for (int i = 0; i < 8; i++) t[j * kLd + c + i] = 0.0f;
}

#ifdef AAH_AVX512
// Boundary tiles, 16 columns c .. c + 15 taken as one group (AVX-512): the union of the rows the two 8-column groups
// see. A lane whose query cannot see a row of it gets kMasked there (so probability 0), and the margin next to the
// union is zeroed for both groups.
inline TileRange attn_vec_keys_16(int q0, int c, int k0, int nk, int W) {
  const TileRange r0 = attn_vec_keys(false, q0, c, k0, nk, W), r1 = attn_vec_keys(false, q0, c + 8, k0, nk, W);
  return {r0.lo, std::max(r0.hi, r1.hi)};
}
inline void attn_prepare_boundary_16(float* st, TileRange rg, int nk, int c, int q0, int k0, int W) {
  for (int half = c; half < c + 16; half += 8) {
    attn_zero_margin(st, rg, nk, half);
    attn_mask_rows(st, rg, half, q0, k0, W);
  }
}
#endif

#ifdef AAH_AVX2
// In-register 8 x 8 transpose: r[a] holds row a on entry and column a on return.
inline void attn_transpose8(__m256 (&r)[8]) {
  __m256 t[8];
  for (int a = 0; a < 4; a++) {
    t[2 * a] = _mm256_unpacklo_ps(r[2 * a], r[2 * a + 1]);
    t[2 * a + 1] = _mm256_unpackhi_ps(r[2 * a], r[2 * a + 1]);
  }
  for (int a = 0; a < 2; a++) {
    r[4 * a + 0] = _mm256_shuffle_ps(t[4 * a + 0], t[4 * a + 2], 0x44);
    r[4 * a + 1] = _mm256_shuffle_ps(t[4 * a + 0], t[4 * a + 2], 0xEE);
    r[4 * a + 2] = _mm256_shuffle_ps(t[4 * a + 1], t[4 * a + 3], 0x44);
    r[4 * a + 3] = _mm256_shuffle_ps(t[4 * a + 1], t[4 * a + 3], 0xEE);
  }
  for (int a = 0; a < 4; a++) {
    t[a] = _mm256_permute2f128_ps(r[a], r[a + 4], 0x20);
    t[a + 4] = _mm256_permute2f128_ps(r[a], r[a + 4], 0x31);
  }
  for (int a = 0; a < 8; a++) r[a] = t[a];
}
#endif

// dst (D, BQ) = src (nq, D)^T * scale, columns nq .. ncol-1 zeroed.
void attn_transpose_tile(float* dst, const float* src, int nq, int ncol, int D, float scale) {
  int i = 0;
#ifdef AAH_AVX2
  const __m256 sc = _mm256_set1_ps(scale);
  for (; i + 8 <= nq; i += 8) {
    int d = 0;
    for (; d + 8 <= D; d += 8) {  // 8 x 8 block transpose in registers
      __m256 r[8];
      for (int a = 0; a < 8; a++) r[a] = _mm256_mul_ps(_mm256_loadu_ps(src + (int64_t)(i + a) * D + d), sc);
      attn_transpose8(r);
      for (int a = 0; a < 8; a++) _mm256_storeu_ps(dst + (d + a) * kLd + i, r[a]);
    }
    for (; d < D; d++)
      for (int a = 0; a < 8; a++) dst[d * kLd + i + a] = src[(int64_t)(i + a) * D + d] * scale;
  }
#endif
  for (; i < nq; i++)
    for (int d = 0; d < D; d++) dst[d * kLd + i] = src[(int64_t)i * D + d] * scale;
  for (int d = 0; d < D; d++)
    for (int c = nq; c < ncol; c++) dst[d * kLd + c] = 0.0f;
}

// Delta rows r0 .. r0 + n - 1: delta[r] = sum over d of dout[r, d] out[r, d], one FMA chain per row in ascending d.
// With AVX2, 8 rows at a time: 8 x 8 blocks of both transposed in registers, so that lane i runs row r0 + i's
// chain in the same order (same bits), 8 chains in flight instead of one.
void attn_delta_rows(float* delta, const float* out, const float* dout, int64_t r0, int64_t n, int D) {
  int64_t r = r0;
#ifdef AAH_AVX2
  if (D % 8 == 0)
    for (; r + 8 <= r0 + n; r += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int d = 0; d < D; d += 8) {
        __m256 o[8], g[8];
        for (int a = 0; a < 8; a++) {
          o[a] = _mm256_loadu_ps(out + (r + a) * D + d);
          g[a] = _mm256_loadu_ps(dout + (r + a) * D + d);
        }
        attn_transpose8(o);
        attn_transpose8(g);
        for (int a = 0; a < 8; a++) acc = _mm256_fmadd_ps(g[a], o[a], acc);
      }
      _mm256_storeu_ps(delta + r, acc);
    }
#endif
  for (; r < r0 + n; r++) {
    const float* o = out + r * D;
    const float* g = dout + r * D;
    float acc = 0;
    for (int d = 0; d < D; d++) acc = std::fma(g[d], o[d], acc);
    delta[r] = acc;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Per-thread scratch. Grown (never shrunk) on the calling thread, then split among the OpenMP threads.
struct AttnScratch {
  Buffer<float> tiles;    // per OpenMP thread: qt, dot, st, dpt, stats
  Buffer<float> delta;    // (B, H, T) backward
  Buffer<double> diag;    // (B, H, n query tiles, 3) forward diagnostics partial sums
  std::vector<int> order;  // task order of the per-head backward (longest first)
  std::vector<double> cost, load;  // its per-task costs and the makespan estimate
  size_t per_thread = 0;
  float* thread_tiles(int tid) { return tiles.data + per_thread * tid; }
};

AttnScratch& attn_scratch() {
  thread_local AttnScratch s;
  return s;
}

template <class U>
void grow(Buffer<U>& buf, size_t n) {
  if (buf.size < n) buf.resize(n);
}

size_t attn_tile_floats(int D) {
  auto round16 = [](size_t n) { return (n + 15) / 16 * 16; };  // keep every array 64-byte aligned
  return 2 * round16((size_t)D * kLd) + 2 * round16((size_t)kBK * kLd) + 10 * kBQ;
}

// Each thread's scratch takes whole 4 KB pages and keeps 16 KB from the next thread's. Packed back to back, the
// two-thread kernel ran 1-15% slower (most at small D and small windows; one thread alike): one core's writes near
// the end of its scratch and the other's near the start of its own probably fight over cache lines that the
// hardware prefetchers pull across the border (docs/attention-kernel.md).
constexpr size_t kPageFloats = 1024, kThreadGapFloats = 4096;
void attn_prepare_scratch(AttnScratch& s, int D, int nthreads) {
  s.per_thread = (attn_tile_floats(D) + kPageFloats - 1) / kPageFloats * kPageFloats + kThreadGapFloats;
  grow(s.tiles, s.per_thread * nthreads);
}

struct TileScratch {
  float *qt, *dot, *st, *dpt;
  float *m, *l, *alpha, *lse, *delta, *ent, *dist, *spare, *mx0, *mx1;
  explicit TileScratch(float* base, int D) {
    const size_t qd = ((size_t)D * kLd + 15) / 16 * 16, kq = ((size_t)kBK * kLd + 15) / 16 * 16;
    qt = base, dot = qt + qd, st = dot + qd, dpt = st + kq;
    float* stats = dpt + kq;
    m = stats, l = m + kBQ, alpha = l + kBQ, lse = alpha + kBQ, delta = lse + kBQ, ent = delta + kBQ;
    dist = ent + kBQ, spare = dist + kBQ, mx0 = spare + kBQ, mx1 = mx0 + kBQ;
  }
};

// attn_local_set_poison_scratch: NaN in both score tiles.
inline void attn_poison(const TileScratch& ts) {
  if (g_poison_scratch) std::fill(ts.st, ts.st + 2 * (((size_t)kBK * kLd + 15) / 16 * 16), NAN);
}

// Thread-local work counts, summed into AttnCounters after the parallel loop.
struct LocalCounts {
  uint64_t computed = 0, visited = 0, skipped = 0, macs = 0;
};

// The query-tile tasks of the forward (and of the per-tile backward's dQ pass), B * H heads x nqt tiles, grouped
// into runs: a thread takes up to `len` consecutive query tiles of one head at a time, latest first. Consecutive
// tiles share most of their key tiles, which the run then finds in cache (forward 1-24% faster, same bits;
// docs/attention-kernel.md). Runs are taken latest first across heads, since under causal windows the latest tiles
// are the longest tasks, and are shorter when there are few tasks per thread, to keep the threads balanced.
struct QueryTileRuns {
  int64_t heads;  // B * H
  int nqt, len;
  int64_t count;  // runs in all
  QueryTileRuns(int64_t heads_, int nqt_, int nthreads)
      : heads(heads_), nqt(nqt_), len((int)std::clamp<int64_t>(heads_ * nqt_ / (16 * (int64_t)nthreads), 1, 8)),
        count(heads_ * ((nqt_ + len - 1) / len)) {}
  // Run u: head bh (b * H + h) and its query tiles qt_hi down to qt_lo.
  void get(int64_t u, int& bh, int& qt_hi, int& qt_lo) const {
    bh = (int)(u % heads);
    qt_hi = nqt - 1 - (int)(u / heads) * len;
    qt_lo = std::max(0, qt_hi - len + 1);
  }
};

// ---------------------------------------------------------------------------------------------------------------
// Forward.

#ifdef AAH_AVX2
// The vector body of attn_softmax_tile: columns c .. c + V::kWidth - 1, key rows rg (masked where needed).
// have_max: the score product's epilogue already took the maxima over even and odd rows (AttnColMaxEpilogue; in
// boundary tiles AttnColMaxMaskedEpilogue, which masked as well).
template <class V>
inline void attn_softmax_cols(float* st, TileRange rg, int c, const TileScratch& ts, bool diag, int q0, int k0,
                              bool have_max) {
  using T = typename V::T;
  const T m_old = V::load(ts.m + c);
  T mx0 = V::set1(kMasked), mx1 = mx0;
  int j = rg.lo;
  if (have_max) {
    mx0 = V::load(ts.mx0 + c), mx1 = V::load(ts.mx1 + c);
  } else {
    for (; j + 2 <= rg.hi; j += 2) {
      mx0 = V::max(mx0, V::load(st + j * kLd + c));
      mx1 = V::max(mx1, V::load(st + (j + 1) * kLd + c));
    }
    if (j < rg.hi) mx0 = V::max(mx0, V::load(st + j * kLd + c));
  }
  const T m_new = V::max(m_old, V::max(mx0, mx1));
  const T alpha = vexp_masked_le_vec<V>(V::sub(m_old, m_new));
  T s0 = V::zero(), s1 = s0;
  if (!diag) {
    for (j = rg.lo; j + 2 <= rg.hi; j += 2) {
      const T e0 = vexp_masked_le_vec<V>(V::sub(V::load(st + j * kLd + c), m_new));
      const T e1 = vexp_masked_le_vec<V>(V::sub(V::load(st + (j + 1) * kLd + c), m_new));
      V::store(st + j * kLd + c, e0);
      V::store(st + (j + 1) * kLd + c, e1);
      s0 = V::add(s0, e0);
      s1 = V::add(s1, e1);
    }
    if (j < rg.hi) {
      const T e0 = vexp_masked_le_vec<V>(V::sub(V::load(st + j * kLd + c), m_new));
      V::store(st + j * kLd + c, e0);
      s0 = V::add(s0, e0);
    }
  } else {
    // a = sum e (s - m_new); dist = sum e (i - j) = (i - k0) sum e - sum e (j - k0)
    T a0 = V::zero(), a1 = a0, j0 = a0, j1 = a0;
    T jf = V::set1((float)rg.lo);  // j as a float, counted along
    const T one = V::set1(1.0f);
    for (j = rg.lo; j + 2 <= rg.hi; j += 2) {
      const T x0 = V::sub(V::load(st + j * kLd + c), m_new);
      const T x1 = V::sub(V::load(st + (j + 1) * kLd + c), m_new);
      const T e0 = vexp_masked_le_vec<V>(x0), e1 = vexp_masked_le_vec<V>(x1);
      V::store(st + j * kLd + c, e0);
      V::store(st + (j + 1) * kLd + c, e1);
      s0 = V::add(s0, e0);
      s1 = V::add(s1, e1);
      a0 = V::fmadd(e0, x0, a0);
      a1 = V::fmadd(e1, x1, a1);
      j0 = V::fmadd(e0, jf, j0);
      jf = V::add(jf, one);
      j1 = V::fmadd(e1, jf, j1);
      jf = V::add(jf, one);
    }
    if (j < rg.hi) {
      const T x0 = V::sub(V::load(st + j * kLd + c), m_new);
      const T e0 = vexp_masked_le_vec<V>(x0);
      V::store(st + j * kLd + c, e0);
      s0 = V::add(s0, e0);
      a0 = V::fmadd(e0, x0, a0);
      j0 = V::fmadd(e0, jf, j0);
    }
    const T l_old = V::load(ts.l + c);
    const T ent_old = V::load(ts.ent + c);
    // ent_new = alpha (ent_old + (m_old - m_new) l_old) + sum e (s - m_new)
    const T ent_shift = V::fmadd(V::sub(m_old, m_new), l_old, ent_old);
    V::store(ts.ent + c, V::fmadd(alpha, ent_shift, V::add(a0, a1)));
    const T irel = V::add(V::set1((float)(q0 + c - k0)), V::iota());
    const T d_tile = V::fmsub(irel, V::add(s0, s1), V::add(j0, j1));
    V::store(ts.dist + c, V::fmadd(alpha, V::load(ts.dist + c), d_tile));
  }
  V::store(ts.l + c, V::fmadd(alpha, V::load(ts.l + c), V::add(s0, s1)));
  V::store(ts.m + c, m_new);
  V::store(ts.alpha + c, alpha);
}
#endif

// Online-softmax update with one key tile. st (nk, ld) holds the scaled scores of queries 0 .. ncol-1 (columns)
// and becomes P~^T = exp(s - m_new), 0 where masked. alpha[i] = exp(m_old - m_new) rescales O and l. In
// boundary tiles only the rows some query of an 8-column group can see are masked and exponentiated, and the rows
// next to them that later products read are set to 0 (attn_zero_margin). With diag: ent accumulates e (s - m) and
// dist accumulates e (i - j), rescaled the same way, so that at the end entropy = log l - ent / l and mean
// distance = dist / l. Where the CPU has AVX-512, 16 columns at a time (boundary tiles: over the union of the two
// 8-column groups' rows, attn_vec_keys_16), with the same bits as 8 at a time; there a boundary tile's score product
// already masked (have_max, kAttnFusedBoundary) and no margin needs zeroing.
void attn_softmax_tile(float* st, int nk, int ncol, const TileScratch& ts, bool diag, bool interior, int q0, int k0,
                       int W, bool have_max) {
  int c = 0;  // ncol is a multiple of 8
#ifdef AAH_AVX512
  for (; c + 16 <= ncol; c += 16) {
    TileRange rg{0, nk};
    if (!interior) {
      rg = attn_vec_keys_16(q0, c, k0, nk, W);
      // The row sums pair rows (j - rg.lo even / odd): the same pairs as the two 8-wide groups only if their
      // first rows differ by an even count. Otherwise the rest goes 8 wide.
      if ((attn_vec_keys(false, q0, c + 8, k0, nk, W).lo - rg.lo) % 2 != 0) break;
      // fused (kAttnFusedBoundary): the score product's epilogue masked, and no product reads past rg
      if (!have_max) attn_prepare_boundary_16(st, rg, nk, c, q0, k0, W);
    }
    attn_softmax_cols<Vec16>(st, rg, c, ts, diag, q0, k0, have_max);
  }
#endif
  for (; c < ncol; c += 8) {
    const TileRange rg = attn_vec_keys(interior, q0, c, k0, nk, W);
    if (!interior) {
      attn_zero_margin(st, rg, nk, c);
      attn_mask_rows(st, rg, c, q0, k0, W);
    }
#ifdef AAH_AVX2
    attn_softmax_cols<Vec8>(st, rg, c, ts, diag, q0, k0, have_max);
#else
    for (int cc = c; cc < c + 8; cc++) {
      const float m_old = ts.m[cc];
      float mx = kMasked;
      for (int j = rg.lo; j < rg.hi; j++) mx = std::max(mx, st[j * kLd + cc]);
      const float m_new = std::max(m_old, mx);
      const float alpha = vexp_masked_scalar(m_old - m_new);
      float sum = 0, a_acc = 0, j_acc = 0;
      for (int j = rg.lo; j < rg.hi; j++) {
        const float x = st[j * kLd + cc] - m_new;
        const float e = vexp_masked_scalar(x);
        st[j * kLd + cc] = e;
        sum += e;
        a_acc = std::fma(e, x, a_acc);
        j_acc = std::fma(e, (float)j, j_acc);
      }
      if (diag) {
        ts.ent[cc] = std::fma(alpha, std::fma(m_old - m_new, ts.l[cc], ts.ent[cc]), a_acc);
        ts.dist[cc] = std::fma(alpha, ts.dist[cc], std::fma((float)(q0 + cc - k0), sum, -j_acc));
      }
      ts.l[cc] = std::fma(alpha, ts.l[cc], sum);
      ts.m[cc] = m_new;
      ts.alpha[cc] = alpha;
    }
#endif
  }
}

struct AttnArgs {
  const float *q, *k, *v;
  const int* window;
  int B, H, Hkv, T, D, group, nqt, nkt;
  float scale;
};

AttnArgs attn_args(const float* q, const float* k, const float* v, const int* window, int B, int H, int Hkv, int T,
                   int D, const char* op) {
  if (B < 0 || H < 1 || Hkv < 1 || T < 0 || D < 1 || H % Hkv != 0)
    fail("[", op, "] bad shape B=", B, " H=", H, " Hkv=", Hkv, " T=", T, " D=", D, " (H must be a multiple of Hkv)");
  for (int h = 0; h < H; h++)
    if (window[h] < 1) fail("[", op, "] window of head ", h, " is ", window[h], ", must be >= 1");
  AttnArgs a{q, k, v, window, B, H, Hkv, T, D, H / Hkv, (T + kBQ - 1) / kBQ, (T + kBK - 1) / kBK,
             1.0f / std::sqrt((float)D)};
  return a;
}

// One forward task: query tile qt of head h in batch b. Writes out and lse rows; diagnostics partial sums in
// dsum[3] (entropy, output norm, usage summed over the tile's rows). prefetch_next: the thread goes on with query
// tile qt - 1 of the same head (a run of QueryTileRuns).
void attn_forward_task(const AttnArgs& a, float* out, float* lse, int b, int h, int qt, TileScratch& ts, bool diag,
                       double* dsum, LocalCounts& cnt, bool prefetch_next) {
  const int D = a.D, T = a.T, W = a.window[h], hk = h / a.group;
  const int q0 = qt * kBQ, nq = std::min(kBQ, T - q0), ncol = (nq + 7) / 8 * 8;
  const float* kbase = a.k + attn_row(b, hk, 0, a.Hkv, T) * D;
  const float* vbase = a.v + attn_row(b, hk, 0, a.Hkv, T) * D;
  float* o = out + attn_row(b, h, q0, a.H, T) * D;

  attn_transpose_tile(ts.qt, a.q + attn_row(b, h, q0, a.H, T) * D, nq, ncol, D, a.scale);
  for (int i = 0; i < ncol; i++) ts.m[i] = kNegBig, ts.l[i] = 0, ts.ent[i] = 0, ts.dist[i] = 0;

  int kt_lo, kt_hi;
  attn_key_tiles(q0, nq, W, kt_lo, kt_hi);
  AttnPrefetch next;  // the next tile's Q rows and the key tile it adds (its outputs: no difference measured)
  if (prefetch_next) {  // qt > qt_lo >= 0
    next.add(a.q, attn_row(b, h, q0 - kBQ, a.H, T), kBQ, D);
    int next_lo, next_hi;
    attn_key_tiles(q0 - kBQ, kBQ, W, next_lo, next_hi);
    if (next_lo < kt_lo) {
      next.add(a.k, attn_row(b, hk, next_lo * kBK, a.Hkv, T), kBK, D);
      next.add(a.v, attn_row(b, hk, next_lo * kBK, a.Hkv, T), kBK, D);
    }
  }
  for (int kt = kt_lo; kt <= kt_hi; kt++) {
    const int k0 = kt * kBK, nk = std::min(kBK, T - k0);
    const bool interior = attn_tile_interior(q0, nq, k0, nk, W);
    const bool fused = (interior || kAttnFusedBoundary) && g_fused_epilogues;
    next.start_visit(kt - kt_lo, kt_hi - kt_lo + 1);
    if (!fused) next.finish_visit();  // no epilogue to drip from
    // S^T (nk, ncol) = K_tile Qt; interior tiles take the column maxima on the way (AttnColMaxEpilogue), and so do
    // boundary tiles where kAttnFusedBoundary, masking first (AttnColMaxMaskedEpilogue)
    const float* kt0 = kbase + (int64_t)k0 * D;
    attn_poison(ts);
    uint64_t qk;
#ifdef AAH_AVX2
    if (fused) {
      for (int i = 0; i < ncol; i++) ts.mx0[i] = kMasked, ts.mx1[i] = kMasked;
      if (interior)
        qk = tile_gemm<kSet>(nk, ncol, kt0, D, 1, ts.qt, kLd, ts.st, kLd, nullptr, TileFullRange{D},
                             AttnColMaxEpilogue{ts.mx0, ts.mx1, &next});
      else
        qk = tile_gemm<kSet>(nk, ncol, kt0, D, 1, ts.qt, kLd, ts.st, kLd, nullptr, AttnScoreRange{q0, k0, W, D},
                             AttnColMaxMaskedEpilogue{ts.mx0, ts.mx1, q0, k0, W, &next});
    } else
#endif
      qk = attn_gemm_tile<kSet>(interior, nk, ncol, D, kt0, D, 1, ts.qt, kLd, ts.st, kLd, nullptr,
                                AttnScoreRange{q0, k0, W, D});
    attn_softmax_tile(ts.st, nk, ncol, ts, diag, interior, q0, k0, W, fused);
    // O (nq, D) = diag(alpha) O + P~ V_tile (the first key tile: O = P~ V_tile)
    const uint64_t pv = attn_gemm_tile_acc<kScaleAdd>(kt == kt_lo, interior, nq, D, nk, ts.st, 1, kLd,
                                                      vbase + (int64_t)k0 * D, D, o, D, ts.alpha,
                                                      AttnQueryRowRange{q0, k0, W, nk});
    next.finish_visit();
    cnt.visited++;
    cnt.computed += qk / D;
    cnt.macs += qk + pv;
  }
  cnt.skipped += kt_lo;  // tiles of the causal triangle that the window skips

  float* lse_row = lse + attn_row(b, h, q0, a.H, T);
  double ent_sum = 0, norm_sum = 0, use_sum = 0;
  for (int i = 0; i < nq; i++) {
    const float inv_l = 1.0f / ts.l[i];
    float* oi = o + (int64_t)i * D;
    for (int d = 0; d < D; d++) oi[d] *= inv_l;
    const float log_l = std::log(ts.l[i]);
    lse_row[i] = ts.m[i] + log_l;
    if (diag) {
      float nrm = 0;
      for (int d = 0; d < D; d++) nrm = std::fma(oi[d], oi[d], nrm);
      ent_sum += (double)log_l - (double)ts.ent[i] / ts.l[i];
      norm_sum += std::sqrt((double)nrm);
      if (W > 1) use_sum += (double)ts.dist[i] / ts.l[i] / (W - 1);
    }
  }
  if (diag) dsum[0] = ent_sum, dsum[1] = norm_sum, dsum[2] = use_sum;
}

// ---------------------------------------------------------------------------------------------------------------
// Backward. For a tile pair: S^T = K Qt, P^T = exp(S^T - lse), dP^T = V dOt, dS^T = P^T (dP^T - Delta) / sqrt(D),
// then dV += P dO, dK += dS^T Q (rows of the key tile), dQ += dS K (rows of the query tile).

// Loads the query-side operands of query tile qt of head h into the scratch.
void attn_bwd_load_qtile(const AttnArgs& a, const float* dout, const float* lse, const float* delta, int b, int h,
                         int qt, TileScratch& ts) {
  const int T = a.T, D = a.D, q0 = qt * kBQ, nq = std::min(kBQ, T - q0), ncol = (nq + 7) / 8 * 8;
  attn_transpose_tile(ts.qt, a.q + attn_row(b, h, q0, a.H, T) * D, nq, ncol, D, a.scale);
  attn_transpose_tile(ts.dot, dout + attn_row(b, h, q0, a.H, T) * D, nq, ncol, D, 1.0f);
  const int64_t r0 = attn_row(b, h, q0, a.H, T);
  for (int i = 0; i < ncol; i++) {
    ts.lse[i] = i < nq ? lse[r0 + i] : -kMasked;  // padding queries get P = 0
    ts.delta[i] = i < nq ? delta[r0 + i] : 0.0f;
  }
}

#ifdef AAH_AVX2
// The vector body of attn_bwd_ds_tile: columns c .. c + V::kWidth - 1, key rows rg.
template <class V>
inline void attn_bwd_ds_cols(float* st, float* dpt, TileRange rg, int c, const TileScratch& ts, float scale) {
  using T = typename V::T;
  const T sc = V::set1(scale), lse = V::load(ts.lse + c), delta = V::load(ts.delta + c);
  for (int j = rg.lo; j < rg.hi; j++) {
    float* sp = st + j * kLd + c;
    float* dp = dpt + j * kLd + c;
    const T p = vexp_masked_le_vec<V>(V::sub(V::load(sp), lse));
    V::store(sp, p);
    V::store(dp, V::mul(V::mul(p, sc), V::sub(V::load(dp), delta)));
  }
}
#endif

// P^T and dS^T from S^T (in st) and dP^T (in dpt), in place; like the forward, boundary tiles mask only the
// rows an 8-column group can see and zero the rows next to them (attn_zero_margin).
void attn_bwd_ds_tile(float* st, float* dpt, int nk, int ncol, const TileScratch& ts, float scale, bool interior,
                      int q0, int k0, int W) {
  int c = 0;
#ifdef AAH_AVX512
  for (; c + 16 <= ncol; c += 16) {
    TileRange rg{0, nk};
    if (!interior) {
      rg = attn_vec_keys_16(q0, c, k0, nk, W);
      attn_zero_margin(dpt, rg, nk, c);
      attn_zero_margin(dpt, rg, nk, c + 8);
      attn_prepare_boundary_16(st, rg, nk, c, q0, k0, W);
    }
    attn_bwd_ds_cols<Vec16>(st, dpt, rg, c, ts, scale);
  }
#endif
  for (; c < ncol; c += 8) {
    const TileRange rg = attn_vec_keys(interior, q0, c, k0, nk, W);
    if (!interior) {
      attn_zero_margin(st, rg, nk, c);
      attn_zero_margin(dpt, rg, nk, c);
      attn_mask_rows(st, rg, c, q0, k0, W);
    }
#ifdef AAH_AVX2
    attn_bwd_ds_cols<Vec8>(st, dpt, rg, c, ts, scale);
#else
    for (int j = rg.lo; j < rg.hi; j++)
      for (int cc = c; cc < c + 8; cc++) {
        const float p = vexp_masked_scalar(st[j * kLd + cc] - ts.lse[cc]);
        st[j * kLd + cc] = p;
        dpt[j * kLd + cc] = (p * scale) * (dpt[j * kLd + cc] - ts.delta[cc]);
      }
#endif
  }
}

// One tile pair (query tile qt of head h, loaded in ts; key tile kt). want_dkdv: dK, dV rows of the key tile
// += (first_dkdv: =, the key tile's first pair); want_dq: dQ rows of the query tile += (first_dq: =).
void attn_bwd_pair(const AttnArgs& a, float* dq, float* dk, float* dv, const float* dout, int b, int h, int qt,
                   int kt, TileScratch& ts, bool want_dkdv, bool first_dkdv, bool want_dq, bool first_dq,
                   LocalCounts& cnt) {
  const int T = a.T, D = a.D, W = a.window[h], hk = h / a.group;
  const int q0 = qt * kBQ, nq = std::min(kBQ, T - q0), ncol = (nq + 7) / 8 * 8;
  const int k0 = kt * kBK, nk = std::min(kBK, T - k0);
  const int64_t krow = attn_row(b, hk, k0, a.Hkv, T) * D, qrow = attn_row(b, h, q0, a.H, T) * D;
  const float* kp = a.k + krow;
  const float* vp = a.v + krow;

  const bool interior = attn_tile_interior(q0, nq, k0, nk, W);
  const AttnScoreRange scores{q0, k0, W, D};
  attn_poison(ts);
  // S^T, then dP^T; st becomes P^T and dpt dS^T / sqrt(D): in the products' epilogues for interior tiles (and for
  // boundary tiles where kAttnFusedBoundary, masking too), else in a pass of their own (attn_bwd_ds_tile, which
  // also masks)
  uint64_t qk, macs;
#ifdef AAH_AVX2
  if (interior && g_fused_epilogues) {
    const TileFullRange all{D};
    qk = tile_gemm<kSet>(nk, ncol, kp, D, 1, ts.qt, kLd, ts.st, kLd, nullptr, all, AttnProbEpilogue{ts.lse});
    macs = qk + tile_gemm<kSet>(nk, ncol, vp, D, 1, ts.dot, kLd, ts.dpt, kLd, nullptr, all,
                                AttnDsEpilogue{ts.st, ts.delta, a.scale});
  } else if (kAttnFusedBoundary && g_fused_epilogues) {
    // Boundary tiles: the epilogues mask as well. The blocks the band skips keep stale values, but no later
    // product reads them (kAttnFusedBoundary).
    qk = tile_gemm<kSet>(nk, ncol, kp, D, 1, ts.qt, kLd, ts.st, kLd, nullptr, scores,
                         AttnProbMaskedEpilogue{ts.lse, q0, k0, W});
    macs = qk + tile_gemm<kSet>(nk, ncol, vp, D, 1, ts.dot, kLd, ts.dpt, kLd, nullptr, scores,
                                AttnDsEpilogue{ts.st, ts.delta, a.scale});
  } else
#endif
  {
    qk = attn_gemm_tile<kSet>(interior, nk, ncol, D, kp, D, 1, ts.qt, kLd, ts.st, kLd, nullptr, scores);
    macs = qk + attn_gemm_tile<kSet>(interior, nk, ncol, D, vp, D, 1, ts.dot, kLd, ts.dpt, kLd, nullptr, scores);
    attn_bwd_ds_tile(ts.st, ts.dpt, nk, ncol, ts, a.scale, interior, q0, k0, W);
  }
  if (want_dkdv) {
    const AttnKeyRowRange keys{q0, k0, W, nq};
    // dV += P^T dO, dK += dS^T Q
    macs += attn_gemm_tile_acc<kAdd>(first_dkdv, interior, nk, D, nq, ts.st, kLd, 1, dout + qrow, D, dv + krow, D,
                                     nullptr, keys);
    macs += attn_gemm_tile_acc<kAdd>(first_dkdv, interior, nk, D, nq, ts.dpt, kLd, 1, a.q + qrow, D, dk + krow, D,
                                     nullptr, keys);
  }
  if (want_dq)  // dQ += dS K
    macs += attn_gemm_tile_acc<kAdd>(first_dq, interior, nq, D, nk, ts.dpt, 1, kLd, kp, D, dq + qrow, D, nullptr,
                                     AttnQueryRowRange{q0, k0, W, nk});
  cnt.visited++;
  cnt.computed += qk / D;
  cnt.macs += macs;
}

// Greedy longest-first makespan of `cost` spread over n threads.
double attn_makespan(const std::vector<int>& order, const std::vector<double>& cost, std::vector<double>& load,
                     int n) {
  load.assign(std::max(1, n), 0.0);
  for (int i : order) *std::min_element(load.begin(), load.end()) += cost[i];
  return *std::max_element(load.begin(), load.end());
}

}  // namespace

void attn_local_set_backward_schedule(AttnBackwardSchedule schedule) { g_backward_schedule = schedule; }
void attn_local_set_poison_scratch(bool on) { g_poison_scratch = on; }
void attn_local_set_fused_epilogues(bool on) {
#ifdef AAH_AVX2
  g_fused_epilogues = on;
#else
  (void)on;
#endif
}

void attn_local_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int* window,
                        int B, int H, int Hkv, int T, int D, AttnDiagnostics* diag, AttnCounters* counters) {
  const AttnArgs a = attn_args(q, k, v, window, B, H, Hkv, T, D, "attn_local_forward");
  const bool want_diag = diag && (diag->entropy || diag->out_norm || diag->usage);
  AttnScratch& s = attn_scratch();
  const int nthreads = omp_get_max_threads();
  attn_prepare_scratch(s, D, nthreads);
  const int64_t ntasks = (int64_t)B * H * a.nqt;
  if (want_diag) grow(s.diag, (size_t)ntasks * 3);
  const QueryTileRuns runs((int64_t)B * H, a.nqt, nthreads);
  uint64_t computed = 0, visited = 0, skipped = 0, macs = 0;

#pragma omp parallel if (runs.count > 1) reduction(+ : computed, visited, skipped, macs)
  {
    TileScratch ts(s.thread_tiles(omp_get_thread_num()), D);
    LocalCounts cnt;
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < runs.count; u++) {
      int bh, qt_hi, qt_lo;
      runs.get(u, bh, qt_hi, qt_lo);
      for (int qt = qt_hi; qt >= qt_lo; qt--)
        attn_forward_task(a, out, lse, bh / H, bh % H, qt, ts, want_diag,
                          want_diag ? s.diag.data + ((int64_t)bh * a.nqt + qt) * 3 : nullptr, cnt, qt > qt_lo);
    }
    computed += cnt.computed, visited += cnt.visited, skipped += cnt.skipped, macs += cnt.macs;
  }

  if (want_diag) {  // fixed-order reduction of the per-task sums: deterministic
    const double n = std::max(1.0, (double)B * T);
    for (int h = 0; h < H; h++) {
      double e = 0, no = 0, u = 0;
      for (int b = 0; b < B; b++)
        for (int qt = 0; qt < a.nqt; qt++) {
          const double* p = s.diag.data + (((int64_t)b * H + h) * a.nqt + qt) * 3;
          e += p[0], no += p[1], u += p[2];
        }
      if (diag->entropy) diag->entropy[h] = e / n;
      if (diag->out_norm) diag->out_norm[h] = no / n;
      if (diag->usage) diag->usage[h] = u / n;
    }
  }
  if (counters) {
    for (int h = 0; h < H; h++) counters->fwd_pairs += (uint64_t)B * attn_visible_pairs(T, window[h]);
    counters->fwd_pairs_computed += computed;
    counters->fwd_tiles_visited += visited;
    counters->fwd_tiles_skipped += skipped;
    counters->macs += macs;
  }
}

void attn_local_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                         const float* q, const float* k, const float* v, const int* window, int B, int H, int Hkv,
                         int T, int D, AttnCounters* counters) {
  const AttnArgs a = attn_args(q, k, v, window, B, H, Hkv, T, D, "attn_local_backward");
  AttnScratch& s = attn_scratch();
  const int nthreads = omp_get_max_threads();
  attn_prepare_scratch(s, D, nthreads);
  const int64_t nrows = (int64_t)B * H * T;
  grow(s.delta, (size_t)std::max<int64_t>(nrows, 1));
  float* delta = s.delta.data;

  // Delta = rowsum(dO * O), one FMA chain per row, in blocks of 64 rows.
  const int64_t nblk = (nrows + 63) / 64;
#pragma omp parallel for schedule(static) if (nrows * D >= (1 << 16))
  for (int64_t blk = 0; blk < nblk; blk++)
    attn_delta_rows(delta, out, dout, blk * 64, std::min<int64_t>(64, nrows - blk * 64), D);

  // Pick the schedule: per_head does 5 tile products per tile pair but has only B * Hkv tasks; per_tile does 7
  // but balances perfectly. Costs in tile pairs.
  const int nkv = B * Hkv;
  bool per_head = g_backward_schedule == AttnBackwardSchedule::per_head;
  std::vector<int>& order = s.order;
  if (g_backward_schedule != AttnBackwardSchedule::per_tile) {
    std::vector<double>& cost = s.cost;
    cost.assign(nkv, 0.0);
    double total = 0;
    for (int h = 0; h < H; h++) {
      double c = 0;
      for (int qt = 0; qt < a.nqt; qt++) {
        int lo, hi;
        attn_key_tiles(qt * kBQ, std::min(kBQ, T - qt * kBQ), window[h], lo, hi);
        c += hi - lo + 1;
      }
      for (int b = 0; b < B; b++) cost[b * Hkv + h / a.group] += c;
      total += c * B;
    }
    order.resize(nkv);
    for (int i = 0; i < nkv; i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return cost[x] > cost[y]; });
    if (g_backward_schedule == AttnBackwardSchedule::automatic)
      per_head = 5.0 * attn_makespan(order, cost, s.load, nthreads) <= 7.0 * total / nthreads;
  }

  uint64_t computed = 0, visited = 0, skipped = 0, macs = 0;
  if (per_head) {
#pragma omp parallel if (nkv > 1) reduction(+ : computed, visited, skipped, macs)
    {
      TileScratch ts(s.thread_tiles(omp_get_thread_num()), D);
      LocalCounts cnt;
#pragma omp for schedule(dynamic, 1)
      for (int t = 0; t < nkv; t++) {
        const int b = order[t] / Hkv, hk = order[t] % Hkv;
        // A key tile's first pair is its diagonal one (query tile kt) of the group's first head: the first pair
        // of each key tile and of each query tile sets dK, dV and dQ rows instead of adding (no memsets).
        for (int h = hk * a.group; h < (hk + 1) * a.group; h++)
          for (int qt = 0; qt < a.nqt; qt++) {
            const int q0 = qt * kBQ, nq = std::min(kBQ, T - q0);
            attn_bwd_load_qtile(a, dout, lse, delta, b, h, qt, ts);
            int lo, hi;
            attn_key_tiles(q0, nq, window[h], lo, hi);
            AttnPrefetch next;  // the next query tile's rows and the key tile it adds (kt = qt + 1)
            if (qt + 1 < a.nqt) {
              const int n1 = std::min(kBQ, T - q0 - kBQ);
              next.add(q, attn_row(b, h, q0 + kBQ, H, T), n1, D);
              next.add(dout, attn_row(b, h, q0 + kBQ, H, T), n1, D);
              next.add(k, attn_row(b, hk, q0 + kBQ, Hkv, T), n1, D);
              next.add(v, attn_row(b, hk, q0 + kBQ, Hkv, T), n1, D);
            }
            for (int kt = lo; kt <= hi; kt++) {
              next.start_visit(kt - lo, hi - lo + 1);
              next.finish_visit();
              attn_bwd_pair(a, dq, dk, dv, dout, b, h, qt, kt, ts, true, h == hk * a.group && kt == qt, true,
                            kt == lo, cnt);
            }
            cnt.skipped += lo;
          }
      }
      computed += cnt.computed, visited += cnt.visited, skipped += cnt.skipped, macs += cnt.macs;
    }
  } else {
    const int64_t n1 = (int64_t)nkv * a.nkt;
    const QueryTileRuns runs2((int64_t)B * H, a.nqt, nthreads);
#pragma omp parallel if (n1 > 1) reduction(+ : computed, visited, skipped, macs)
    {
      TileScratch ts(s.thread_tiles(omp_get_thread_num()), D);
      LocalCounts cnt;
      // Pass 1: dK, dV of key tile kt of kv head hk; its query heads in order, query tiles ascending.
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < n1; t++) {
        const int kt = (int)(t / nkv), b = (int)(t % nkv) / Hkv, hk = (int)(t % nkv) % Hkv;
        const int k0 = kt * kBK, nk = std::min(kBK, T - k0);
        for (int h = hk * a.group; h < (hk + 1) * a.group; h++) {
          int lo, hi;  // lo = kt: the first pair is the diagonal one, which sets dK, dV (no memset)
          attn_query_tiles(k0, nk, window[h], T, lo, hi);
          for (int qt = lo; qt <= hi; qt++) {
            attn_bwd_load_qtile(a, dout, lse, delta, b, h, qt, ts);
            attn_bwd_pair(a, dq, dk, dv, dout, b, h, qt, kt, ts, true, h == hk * a.group && qt == lo, false, false,
                          cnt);
          }
        }
      }
      // Pass 2: dQ of query tile qt of head h, key tiles ascending; query tiles in runs, as the forward's.
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < runs2.count; u++) {
        int bh, qt_hi, qt_lo;
        runs2.get(u, bh, qt_hi, qt_lo);
        const int b = bh / H, h = bh % H;
        for (int qt = qt_hi; qt >= qt_lo; qt--) {
          const int q0 = qt * kBQ, nq = std::min(kBQ, T - q0);
          attn_bwd_load_qtile(a, dout, lse, delta, b, h, qt, ts);
          int lo, hi;
          attn_key_tiles(q0, nq, window[h], lo, hi);
          for (int kt = lo; kt <= hi; kt++)
            attn_bwd_pair(a, dq, dk, dv, dout, b, h, qt, kt, ts, false, false, true, kt == lo, cnt);
          cnt.skipped += lo;
        }
      }
      computed += cnt.computed, visited += cnt.visited, skipped += cnt.skipped, macs += cnt.macs;
    }
  }
  if (counters) {
    for (int h = 0; h < H; h++) counters->bwd_pairs += (uint64_t)B * attn_visible_pairs(T, window[h]);
    counters->bwd_pairs_computed += computed;
    counters->bwd_tiles_visited += visited;
    counters->bwd_tiles_skipped += skipped;
    counters->macs += macs;
  }
}

}  // namespace aah::cpu
