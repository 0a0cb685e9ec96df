#pragma once
// The table of targets: each target's kernels as one table of function pointers, the targets this
// build compiled (simd.hpp says which), and the one that runs. linear() calls the products
// through a table (Workspace::kernels), by default the one of active().
#include "minimind/detail/kernels/bf16.hpp"
#include "minimind/detail/kernels/f32.hpp"
#include "minimind/detail/kernels/f32_panels.hpp"
#include "minimind/detail/kernels/format.hpp"
#include "minimind/detail/kernels/formats.hpp"
#include "minimind/detail/kernels/gemm.hpp"
#include "minimind/detail/kernels/ggml.hpp"
#include "minimind/detail/kernels/ops.hpp"
#include "minimind/detail/kernels/q4.hpp"
#include "minimind/detail/kernels/q8.hpp"
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/detail/kernels/thread_pool.hpp"
#include "minimind/detail/kernels/weight.hpp"
#include "minimind/tensor.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

namespace minimind::kernels {

// Below this many positions a product is done as that many matrix-vector products, the decode
// kernels' own: chunk by chunk of rows, so each chunk comes from memory once and is read again
// from cache for every position. A decode step of a small batch then computes exactly what each
// sequence's decode alone computes, and streams whole rows as decode does, where the GEMM's
// blocks of 12 rows x 256 columns left it slower than the memory allows.
// 13 measured best for batched decode (minimind-bench -b; the commit that set it has the
// numbers). A format's target section may set its own (gemm_min_rows(View), as
// f32 does on AVX-512, where its decode products multiply register tiles of several positions).
inline constexpr Index kGemmMinRows = 13;
// The most positions any format's decode products take on any target.
inline constexpr Index kMaxDecodePositions = 31;
// Rows per chunk of a decode product: whole cache lines of output, 4-row kernels.
inline constexpr Index kDecodeGrain = 16;

// Format F's decode products on one target, for positions i < in.size() (fewer than
// Kernels::gemm_from(F::id)): y[i * y_stride + r] = W[r, :] x_i for r in [begin, end), chunk by chunk.
template <class F>
using Matvec = void (*)(const typename F::View& w, std::span<const DecodeInput> in, float* y, Index y_stride,
                        Index begin, Index end);
template <class List>
struct MatvecsOf;
template <class... Fs>
struct MatvecsOf<FormatList<Fs...>> {
  using type = std::tuple<Matvec<Fs>...>;
};

// One target's kernels.
struct Kernels {
  const char* name;                  // "avx512", "avx2", "neon", "wasm_simd128" or "scalar"
  // Whether this target has f32_panels' fast products (its AVX-512 ones); the loader holds f32
  // models in them only where the CPU measured them faster too (f32_panels_preferred).
  bool f32_panels;
  MatvecsOf<Formats>::type matvecs;  // each format's decode products
  // Per format (in WeightFormat order): from how many positions its products run on the GEMM.
  std::array<Index, std::tuple_size_v<MatvecsOf<Formats>::type>> gemm_min_rows;
  // x [cols] quantized in q8's blocks, for the formats that multiply quantized activations.
  void (*quantize_activations)(const float* x, Index cols, int16_t* q, float* d);
  // x [cols] quantized to int8 in q4's blocks with their sums, for the formats that multiply those.
  void (*quantize_activations_int8)(const float* x, Index cols, int8_t* q, float* d, int32_t* s);
  // y = X W^T for each product (gemm.hpp).
  void (*gemm_each)(const float* x, Index x_stride, Index n, std::span<const GemmProduct> products,
                    GemmScratch& scratch, ThreadPool* pool);
  // The float work beside the products (ops.hpp).
  void (*silu_mul)(float* g, const float* u, Index n);
  void (*attend_heads)(const HeadAttention<float>& a);

  template <class F>
  Matvec<F> matvec() const {
    return std::get<Matvec<F>>(matvecs);
  }
  Index gemm_from(WeightFormat format) const { return gemm_min_rows[static_cast<size_t>(format)]; }
};

// Every target the kernels know, best first.
inline constexpr std::array<std::string_view, 5> kTargetNames{"avx512", "avx2", "neon", "wasm_simd128", "scalar"};

}  // namespace minimind::kernels

// Each target's sections (target.hpp). In a dispatch build the x86 ones go between pragmas: GCC
// compiles the functions defined there for `isa`, clang puts the target attribute on each; GCC's
// note that a lambda returning a vector changes the ABI (as it would for a caller outside) is
// dropped, since its callers are inside too.
#define MINIMIND_PRAGMA(x) _Pragma(#x)
#define MINIMIND_STRINGIFY(x) MINIMIND_STRINGIFY_TOKENS(x)
#define MINIMIND_STRINGIFY_TOKENS(x) #x
#if MINIMIND_X86_DISPATCH && defined(__clang__)
#define MINIMIND_TARGET_BEGIN(isa) MINIMIND_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define MINIMIND_TARGET_END MINIMIND_PRAGMA(clang attribute pop)
#elif MINIMIND_X86_DISPATCH
#define MINIMIND_TARGET_BEGIN(isa)                                                                           \
  MINIMIND_PRAGMA(GCC push_options) MINIMIND_PRAGMA(GCC target(isa)) MINIMIND_PRAGMA(GCC diagnostic push) \
  MINIMIND_PRAGMA(GCC diagnostic ignored "-Wpsabi")
#define MINIMIND_TARGET_END MINIMIND_PRAGMA(GCC diagnostic pop) MINIMIND_PRAGMA(GCC pop_options)
#else
#define MINIMIND_TARGET_BEGIN(isa)
#define MINIMIND_TARGET_END
#endif

#if MINIMIND_HAS_AVX512
#define MINIMIND_TARGET avx512
#define MINIMIND_AVX512 1
#define MINIMIND_AVX2 1
MINIMIND_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#include "minimind/detail/kernels/target.hpp"
MINIMIND_TARGET_END
#endif
#if MINIMIND_HAS_AVX2
#define MINIMIND_TARGET avx2
#define MINIMIND_AVX2 1
MINIMIND_TARGET_BEGIN("avx2,fma,f16c")
#include "minimind/detail/kernels/target.hpp"
MINIMIND_TARGET_END
#endif
#if MINIMIND_HAS_NEON
#define MINIMIND_TARGET neon
#define MINIMIND_NEON 1
#include "minimind/detail/kernels/target.hpp"
#endif
#if MINIMIND_HAS_WASM_SIMD
#define MINIMIND_TARGET wasm_simd128
#define MINIMIND_WASM_SIMD 1
#include "minimind/detail/kernels/target.hpp"
#endif
#define MINIMIND_TARGET scalar
#include "minimind/detail/kernels/target.hpp"

#undef MINIMIND_TARGET_BEGIN
#undef MINIMIND_TARGET_END
#undef MINIMIND_PRAGMA
#undef MINIMIND_STRINGIFY
#undef MINIMIND_STRINGIFY_TOKENS

namespace minimind::kernels {

// Whether this CPU runs the x86 targets: in a dispatch build as cpuid says, otherwise as the
// compiler's flags promised.
#if MINIMIND_X86_DISPATCH
inline CpuFeatures x86_features() { return cpu_features(); }
#elif MINIMIND_HAS_AVX2
inline CpuFeatures x86_features() { return {true, MINIMIND_HAS_AVX512 == 1}; }
#endif

// A target this build compiled, and whether this CPU runs it.
struct Target {
  const Kernels* kernels;
  bool runs;
};

// The targets this build compiled, best first; scalar, last, runs everywhere.
inline std::span<const Target> targets() {
  static const std::array list{
#if MINIMIND_HAS_AVX512
      Target{&avx512::kKernels, x86_features().avx512},
#endif
#if MINIMIND_HAS_AVX2
      Target{&avx2::kKernels, x86_features().avx2},
#endif
#if MINIMIND_HAS_NEON
      Target{&neon::kKernels, true},
#endif
#if MINIMIND_HAS_WASM_SIMD
      Target{&wasm_simd128::kKernels, true},
#endif
      Target{&scalar::kKernels, true},
  };
  return list;
}

// The best target this CPU runs, chosen once: the one the products run on (Workspace::kernels).
inline const Kernels& active() {
  static const Kernels& best =
      *std::find_if(targets().begin(), targets().end(), [](const Target& t) { return t.runs; })->kernels;
  return best;
}

// Whether f32 models are held in f32_panels (WeightLoader::held asks): where the active kernels
// have their fast products and this CPU measured them faster than row-major f32 (simd.hpp).
inline bool f32_panels_preferred() {
#if defined(__x86_64__)
  return active().f32_panels && f32_panels_on_this_cpu();
#else
  return active().f32_panels;
#endif
}

// Whether a GGUF's Q4_0 matrices are relaid in groups of four rows at load (ggml::group_rows):
// where the active kernels are x86's, whose q4 group kernels multiply that order fastest.
inline bool ggml_groups_rows() {
  const std::string_view target = active().name;
  return target == "avx512" || target == "avx2";
}

// The name of the active target (the line `kernels: NAME` of minimind-next --info).
inline const char* name() { return active().name; }

}  // namespace minimind::kernels
