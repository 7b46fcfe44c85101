// AAH_AVX2: the AVX2 + FMA paths of the CPU kernels are compiled in (the release build's -march=native on a CPU
// that has them); without it every kernel takes its portable scalar path.
#pragma once
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define AAH_AVX2 1
#endif
// AAH_AVX512: the 16-wide tile products (kernels/cpu/tile_gemm.h) are compiled in as well.
#if defined(AAH_AVX2) && defined(__AVX512F__)
#define AAH_AVX512 1
#endif
