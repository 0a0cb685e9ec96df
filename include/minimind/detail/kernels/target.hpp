// One target's kernels: the target sections of the kernel headers, compiled in the target's
// namespaces (simd.hpp), and their table. No include guard: targets.hpp includes this once per
// target, with MINIMIND_TARGET and that target's instruction-set macros defined, after every
// header the sections use (so none of those is first compiled here, for the target).
#ifndef MINIMIND_DETAIL_KERNELS_GEMM_HPP
#error "target.hpp is included by targets.hpp, after the headers the target sections use"
#endif
#ifndef MINIMIND_AVX512
#define MINIMIND_AVX512 0
#endif
#ifndef MINIMIND_AVX2
#define MINIMIND_AVX2 0
#endif
#ifndef MINIMIND_NEON
#define MINIMIND_NEON 0
#endif
#ifndef MINIMIND_WASM_SIMD
#define MINIMIND_WASM_SIMD 0
#endif
#if MINIMIND_AVX2 || MINIMIND_NEON || MINIMIND_WASM_SIMD
#define MINIMIND_SIMD 1
#else
#define MINIMIND_SIMD 0
#endif

#include "minimind/detail/kernels/simd.hpp"
#include "minimind/detail/kernels/f32.hpp"
#include "minimind/detail/kernels/f32_panels.hpp"
#include "minimind/detail/kernels/bf16.hpp"
#include "minimind/detail/kernels/q8.hpp"
#include "minimind/detail/kernels/q4.hpp"
#include "minimind/detail/kernels/gemm_int8.hpp"
#include "minimind/detail/kernels/ggml.hpp"
#include "minimind/detail/kernels/gemm.hpp"
#include "minimind/detail/kernels/ops.hpp"

namespace minimind::kernels::MINIMIND_TARGET {

// Format F's decode products (targets.hpp): its matvec_positions where its section has one (all
// the positions row by row), else its matvec (f32.hpp, bf16.hpp, q8.hpp, q4.hpp, picked by the View)
// chunk by chunk, each chunk for every position.
template <class F>
void matvec_chunks(const typename F::View& w, std::span<const DecodeInput> in, float* y, Index y_stride, Index begin,
                   Index end) {
  if constexpr (requires { matvec_positions(w, in, y, y_stride, begin, end); }) {
    matvec_positions(w, in, y, y_stride, begin, end);
  } else {
    for (Index b = begin; b < end; b += kDecodeGrain) {
      const Index e = std::min(end, b + kDecodeGrain);
      for (size_t i = 0; i < in.size(); ++i) matvec(w, in[i], y + static_cast<Index>(i) * y_stride, b, e);
    }
  }
}

template <class... Fs>
constexpr MatvecsOf<Formats>::type matvecs(FormatList<Fs...>) {
  return {&matvec_chunks<Fs>...};
}

// Format F's gemm_min_rows(View) where its section has one, else kGemmMinRows.
template <class F>
constexpr Index gemm_min_rows_of() {
  if constexpr (requires(const typename F::View& v) { gemm_min_rows(v); }) {
    static_assert(gemm_min_rows(typename F::View{}) <= kMaxDecodePositions + 1);
    return gemm_min_rows(typename F::View{});
  } else {
    return kGemmMinRows;
  }
}
template <class... Fs>
constexpr decltype(Kernels::gemm_min_rows) gemm_min_rows_table(FormatList<Fs...>) {
  return {gemm_min_rows_of<Fs>()...};
}

inline constexpr Kernels kKernels{MINIMIND_STRINGIFY(MINIMIND_TARGET), MINIMIND_AVX512 == 1, matvecs(Formats{}), gemm_min_rows_table(Formats{}),
                                  &q8::MINIMIND_TARGET::quantize_activations,
                                  &q4::MINIMIND_TARGET::quantize_activations, &gemm_each,
                                  &silu_mul, &attend_heads};

}  // namespace minimind::kernels::MINIMIND_TARGET

#undef MINIMIND_TARGET
#undef MINIMIND_AVX512
#undef MINIMIND_AVX2
#undef MINIMIND_NEON
#undef MINIMIND_WASM_SIMD
#undef MINIMIND_SIMD
