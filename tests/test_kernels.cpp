// The fast kernels (include/minimind/detail/kernels/) against their plain references on random inputs:
// each format's matrix-vector product, the prefill GEMM, the dispatching linear(), the pool, and the
// float ops beside the products (SwiGLU's silu * up, the attention of a group of heads);
// the kernels of every target this build compiled and this CPU runs (kernels::targets()).
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

using namespace minimind;

namespace {

MatrixRM<float> random_matrix(Index rows, Index cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  MatrixRM<float> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

// The weight as the plain path sees it: every element widened to float.
MatrixRM<float> widened(const Weight<float>& w) {
  MatrixRM<float> m(w.rows(), w.cols());
  for (Index r = 0; r < w.rows(); ++r) w.row_to(r, m.row(r).data());
  return m;
}

// x after q8's per-block rounding of activations (what the q8 kernels multiply).
MatrixRM<float> q8_rounded(const MatrixRM<float>& x) {
  const Index blocks = kernels::q8::blocks_for(x.cols());
  std::vector<int16_t> q(static_cast<size_t>(blocks * 32));
  std::vector<float> d(static_cast<size_t>(blocks));
  MatrixRM<float> out(x.rows(), x.cols());
  for (Index r = 0; r < x.rows(); ++r) {
    kernels::q8::scalar::quantize_activations(x.row(r).data(), x.cols(), q.data(), d.data());
    for (Index c = 0; c < x.cols(); ++c) out(r, c) = d[static_cast<size_t>(c / 32)] * q[static_cast<size_t>(c)];
  }
  return out;
}

// x after q4's per-block rounding of activations to int8 (what the q4 kernels multiply).
MatrixRM<float> q4_rounded(const MatrixRM<float>& x) {
  const Index blocks = kernels::q4::blocks_for(x.cols());
  std::vector<int8_t> q(static_cast<size_t>(blocks * 32));
  std::vector<float> d(static_cast<size_t>(blocks));
  std::vector<int32_t> s(static_cast<size_t>(blocks));
  MatrixRM<float> out(x.rows(), x.cols());
  for (Index r = 0; r < x.rows(); ++r) {
    kernels::q4::scalar::quantize_activations(x.row(r).data(), x.cols(), q.data(), d.data(), s.data());
    for (Index c = 0; c < x.cols(); ++c) out(r, c) = d[static_cast<size_t>(c / 32)] * q[static_cast<size_t>(c)];
  }
  return out;
}

// x as format's products see it: rounded for q8 and q4, as it is for the others.
MatrixRM<float> rounded_for(WeightFormat format, const MatrixRM<float>& x) {
  return format == WeightFormat::Q8 ? q8_rounded(x) : format == WeightFormat::Q4 ? q4_rounded(x) : x;
}

double max_abs(const MatrixRM<float>& a, const MatrixRM<float>& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  return (a - b).cwiseAbs().maxCoeff();
}

// The kernels of every target this build compiled and this CPU runs, best first.
std::vector<const kernels::Kernels*> runnable_targets() {
  std::vector<const kernels::Kernels*> out;
  for (const kernels::Target& t : kernels::targets()) {
    if (t.runs) out.push_back(t.kernels);
  }
  return out;
}

// The target of that name, if this build compiled it and this CPU runs it.
const kernels::Kernels* runnable_target(std::string_view name) {
  for (const kernels::Kernels* k : runnable_targets())
    if (std::string_view(k->name) == name) return k;
  return nullptr;
}

// y[r] = W[r, :] x for r in [begin, end), on target k, for a weight held in format F.
template <class F>
void matvec(const kernels::Kernels& k, const Weight<float>& w, const kernels::DecodeInput& in, float* y, Index begin, Index end) {
  k.matvec<F>()(w.format_view<F>(), {&in, 1}, y, 0, begin, end);
}

}  // namespace

TEST_CASE("thread pool: every task runs once per call, ranges cover [0, count) exactly") {
  for (int threads : {1, 2, 3}) {
    kernels::ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (int round = 0; round < 200; ++round) {
      std::vector<std::atomic<int>> hits(1000);
      const int64_t count = 1 + (round * 37) % 1000;
      pool.parallel_for(count, 16, [&](int64_t begin, int64_t end) {
        CHECK(begin % 16 == 0);
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < 1000; ++i) REQUIRE(hits[static_cast<size_t>(i)] == (i < count ? 1 : 0));
    }
    std::atomic<int> tasks{0};
    pool.run([&](int t, int n) {
      CHECK(n == threads);
      CHECK(t < n);
      tasks++;
    });
    CHECK(tasks == threads);
    // A nested call runs inline instead of deadlocking.
    std::atomic<int> inner{0};
    pool.run([&](int, int) { pool.parallel_for(64, 1, [&](int64_t b, int64_t e) { inner += static_cast<int>(e - b); }); });
    CHECK(inner == 64 * threads);
  }
}

TEST_CASE("thread pool: dynamic chunks cover [0, count) exactly, each on a valid thread") {
  for (int threads : {1, 2, 3}) {
    kernels::ThreadPool pool(threads);
    for (int round = 0; round < 200; ++round) {
      std::vector<std::atomic<int>> hits(1000);
      const int64_t count = 1 + (round * 37) % 1000, chunk = 1 + round % 50;
      pool.parallel_for_dynamic(count, chunk, [&](int64_t begin, int64_t end, int t) {
        if (threads == 1) CHECK((begin == 0 && end == count));  // one thread: one call
        else CHECK((begin % chunk == 0 && end - begin <= chunk));
        CHECK((t >= 0 && t < threads));
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < 1000; ++i) REQUIRE(hits[static_cast<size_t>(i)] == (i < count ? 1 : 0));
    }
    std::atomic<int> inner{0};  // nested: inline on the calling thread
    pool.run([&](int, int) { pool.parallel_for_dynamic(64, 5, [&](int64_t b, int64_t e, int) { inner += static_cast<int>(e - b); }); });
    CHECK(inner == 64 * threads);
  }
}

TEST_CASE("bf16 pair order: each whole 32 as its even then its odd offsets, the tail as it is") {
  for (Index cols : {0, 5, 32, 70}) {
    CAPTURE(cols);
    std::vector<float> x(static_cast<size_t>(cols)), out(static_cast<size_t>(cols), -1.0f);
    for (Index c = 0; c < cols; ++c) x[static_cast<size_t>(c)] = static_cast<float>(c);
    kernels::bf16::to_pair_order(x.data(), cols, out.data());
    for (Index c = 0; c < cols; ++c) {
      const Index block = c / 32 * 32, j = c % 32;
      const Index from = block + 32 > cols ? c : block + (j < 16 ? 2 * j : 2 * (j - 16) + 1);
      CHECK(out[static_cast<size_t>(c)] == static_cast<float>(from));
    }
  }
}

TEST_CASE("bf16 conversion rounds to nearest even and widens exactly") {
  CHECK(kernels::bf16::from_float(1.0f) == 0x3F80);
  CHECK(kernels::bf16::to_float(0x3F80) == 1.0f);
  CHECK(kernels::bf16::to_float(kernels::bf16::from_float(-2.5f)) == -2.5f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  CHECK(kernels::bf16::to_float(kernels::bf16::from_float(1.0f + 1.0f / 256)) == 1.0f);
  CHECK(kernels::bf16::to_float(kernels::bf16::from_float(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
  CHECK(std::isnan(kernels::bf16::to_float(kernels::bf16::from_float(std::nanf("")))));
  const MatrixRM<float> m = random_matrix(3, 37, 1);
  for (Index i = 0; i < m.size(); ++i) {
    const float x = m.data()[i];
    CHECK(std::abs(kernels::bf16::to_float(kernels::bf16::from_float(x)) - x) <= std::abs(x) * (1.0f / 256));
  }
}

TEST_CASE("q8 quantization: blocks of 32, error within half a step of each block's scale") {
  const Index cols = 100;  // 4 blocks, the last padded
  const MatrixRM<float> m = random_matrix(5, cols, 2);
  const Weight<float> w = Weight<float>::owned(m).to_format(WeightFormat::Q8);
  CHECK(w.format() == WeightFormat::Q8);
  CHECK(w.q8_view().blocks == 4);
  CHECK(w.bytes() == 5u * 4u * 34u);
  const MatrixRM<float> back = widened(w);
  for (Index r = 0; r < m.rows(); ++r) {
    for (Index b = 0; b < 4; ++b) {
      const Index begin = b * 32, len = std::min<Index>(32, cols - begin);
      const float amax = m.row(r).segment(begin, len).cwiseAbs().maxCoeff();
      const float err = (m.row(r).segment(begin, len) - back.row(r).segment(begin, len)).cwiseAbs().maxCoeff();
      CHECK(err <= amax / 127.0f * 0.5f * 1.01f + 1e-6f);
    }
  }
  // Padding is zero, so it adds nothing to a dot product.
  for (Index c = cols; c < 128; ++c) CHECK(kernels::q8::block_ptr(w.q8_view(), 0, 3)[c - 96] == 0);

  // Activations: int16 with float scales, same blocks; every target's (whole blocks vectorized,
  // the last one not) gives the scalar rule's bit for bit.
  for (Index r = 0; r < m.rows(); ++r) {
    std::vector<int16_t> q(128);
    std::vector<float> d(4);
    kernels::q8::scalar::quantize_activations(m.row(r).data(), cols, q.data(), d.data());
    for (Index c = 0; c < cols; ++c) {
      const float expected = m(r, c) / d[static_cast<size_t>(c / 32)];
      CHECK(std::abs(q[static_cast<size_t>(c)] - expected) <= 0.5f + 1e-3f);
    }
    for (const kernels::Kernels* k : runnable_targets()) {
      CAPTURE(k->name);
      std::vector<int16_t> target_q(128, 99);
      std::vector<float> target_d(4, -1.0f);
      k->quantize_activations(m.row(r).data(), cols, target_q.data(), target_d.data());
      CHECK(target_q == q);
      CHECK(target_d == d);
    }
  }
}

TEST_CASE("q4 quantization: blocks of 32 nibbles (weight j low, j + 16 high), the largest magnitude exact, the rest within half a step") {
  const Index cols = 100;  // 4 blocks, the last padded
  const MatrixRM<float> m = random_matrix(6, cols, 4);  // a group of four rows and two after it
  const Weight<float> w = Weight<float>::owned(m).to_format(WeightFormat::Q4);
  CHECK(w.format() == WeightFormat::Q4);
  const kernels::q4::View v = w.format_view<kernels::q4::Format>();
  CHECK(v.blocks == 4);
  CHECK(w.bytes() == 6u * 4u * 18u);
  const MatrixRM<float> back = widened(w);
  for (Index r = 0; r < m.rows(); ++r) {
    for (Index b = 0; b < 4; ++b) {
      CAPTURE(r);
      CAPTURE(b);
      const Index begin = b * 32, len = std::min<Index>(32, cols - begin);
      Index peak = 0;
      const float amax = m.row(r).segment(begin, len).cwiseAbs().maxCoeff(&peak);
      const float step = std::abs(kernels::q4::half_to_float(v.d[kernels::q4::block_index(v, r, b)]));
      CHECK(step == doctest::Approx(amax / 8).epsilon(1e-3));
      // The peak is -8 steps: exact up to the float16 rounding of the scale.
      CHECK(std::abs(back(r, begin + peak) - m(r, begin + peak)) <= amax * 1e-3f);
      // Within half a step, except values past +7 steps (opposite the peak, -8 steps), which the
      // largest level holds: within one step.
      const float scale = kernels::q4::half_to_float(v.d[kernels::q4::block_index(v, r, b)]);
      for (Index c = begin; c < begin + len; ++c) {
        const bool past = m(r, c) / scale > 7.5f;
        CHECK(std::abs(m(r, c) - back(r, c)) <= step * (past ? 1.0f : 0.5f) * 1.01f);
      }
      // The nibbles: level j in the low half of byte j, level j + 16 in its high half.
      const uint8_t* q = v.q + kernels::q4::block_index(v, r, b) * 16;
      for (Index j = 0; j < len; ++j) {
        const int level = j < 16 ? q[j] & 0xF : q[j - 16] >> 4;
        CHECK(static_cast<float>(level - 8) * kernels::q4::half_to_float(v.d[kernels::q4::block_index(v, r, b)]) == back(r, begin + j));
      }
    }
  }
  // Rows 0-3 interleave block by block; rows 4 and 5 follow whole.
  CHECK(kernels::q4::block_index(v, 1, 2) == 2 * 4 + 1);
  CHECK(kernels::q4::block_index(v, 4, 0) == 16);
  CHECK(kernels::q4::block_index(v, 5, 3) == 23);
  // Padding is level 8, zero: it adds nothing to a dot product.
  for (Index j = cols - 96; j < 32; ++j) CHECK(kernels::q4::level(v.q + kernels::q4::block_index(v, 0, 3) * 16, j) == 8);

  // Activations: int8 with float scales and sums, same blocks; every target's gives the scalar
  // rule's bit for bit.
  for (Index r = 0; r < m.rows(); ++r) {
    std::vector<int8_t> q(128);
    std::vector<float> d(4);
    std::vector<int32_t> sums(4);
    kernels::q4::scalar::quantize_activations(m.row(r).data(), cols, q.data(), d.data(), sums.data());
    for (Index c = 0; c < 128; ++c) {
      if (c >= cols) CHECK(q[static_cast<size_t>(c)] == 0);
      else CHECK(std::abs(q[static_cast<size_t>(c)] - m(r, c) / d[static_cast<size_t>(c / 32)]) <= 0.5f + 1e-3f);
    }
    for (Index b = 0; b < 4; ++b) {
      int sum = 0;
      for (Index c = b * 32; c < b * 32 + 32; ++c) sum += q[static_cast<size_t>(c)];
      CHECK(sums[static_cast<size_t>(b)] == sum);
    }
    for (const kernels::Kernels* k : runnable_targets()) {
      CAPTURE(k->name);
      std::vector<int8_t> target_q(128, 99);
      std::vector<float> target_d(4, -1.0f);
      std::vector<int32_t> target_s(4, -1);
      k->quantize_activations_int8(m.row(r).data(), cols, target_q.data(), target_d.data(), target_s.data());
      CHECK(target_q == q);
      CHECK(target_d == d);
      CHECK(target_s == sums);
    }
  }
}

TEST_CASE("f32 layout per CPU: f32_panels only where measured faster (AMD family 0x1A), row-major elsewhere") {
#if defined(__x86_64__)
  CHECK(kernels::f32_panels_measured_faster(true, 0x1A));
  CHECK_FALSE(kernels::f32_panels_measured_faster(true, 0x19));  // Zen 4: measured no faster
  CHECK_FALSE(kernels::f32_panels_measured_faster(false, 6));    // Intel: measured slower in prefill
  const bool expected = kernels::active().f32_panels && kernels::f32_panels_on_this_cpu();
  MESSAGE("this CPU: " << std::string(kernels::cpu_is_amd() ? "AMD" : "not AMD") << " family " << kernels::cpu_family()
                       << ", kernels " << std::string(kernels::name()) << ": f32 held "
                       << std::string(expected ? "in f32_panels" : "row-major"));
#else
  const bool expected = kernels::active().f32_panels;
#endif
  CHECK(kernels::f32_panels_preferred() == expected);
  CHECK(WeightLoader<float>::held(WeightFormat::F32) == (expected ? WeightFormat::F32Panels : WeightFormat::F32));
  CHECK(WeightLoader<float>::held(WeightFormat::F32, false) == WeightFormat::F32);  // LoadOptions::f32_panels false
  CHECK(WeightLoader<double>::held(WeightFormat::F32) == WeightFormat::F32);
  // Both layouts run whatever this CPU chose (and agree): a model asked for row-major and one in panels.
  Config c = Config::minimind2_small();
  c.num_hidden_layers = 1;
  LoadOptions row_major{WeightFormat::F32, 1};
  row_major.f32_panels = false;
  const auto rows = MiniMindForCausalLM<float>::random(c, 9, row_major);
  const auto panels = MiniMindForCausalLM<float>::random(c, 9, {WeightFormat::F32Panels, 1});
  CHECK(rows.model.embed_tokens.weight().format() == WeightFormat::F32);
  CHECK(panels.model.embed_tokens.weight().format() == WeightFormat::F32Panels);
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 613 + 5) % 6400);  // prefill through the GEMM
  CHECK(max_abs(rows.forward(ids), panels.forward(ids)) <= 1e-4);
}

TEST_CASE("linear(): every target, every format, decode and prefill, 1 and 2 threads, against the plain Eigen product") {
  // The plain product on the widened weight (and, for q8 and q4, on the rounded activations).
  for (const kernels::Kernels* k : runnable_targets()) {
    for (WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8, WeightFormat::F32Panels, WeightFormat::Q4}) {
      for (int threads : {1, 2}) {
        kernels::ThreadPool pool(threads);
        kernels::Workspace work;
        work.pool = &pool;
        work.kernels = k;
        for (Index n : {1, 2, 3, 7, 33}) {
          for (const auto& shape : {std::pair<Index, Index>{64, 48}, {200, 64}, {1408, 512}, {96, 1408}, {50, 45}, {13, 301}}) {
            const Index rows = shape.first, cols = shape.second;  // clang 14 cannot capture structured bindings
            CAPTURE(k->name);
            CAPTURE(std::string(format_name(format)));
            CAPTURE(threads);
            CAPTURE(n);
            CAPTURE(rows);
            CAPTURE(cols);
            const Weight<float> w = Weight<float>::owned(random_matrix(rows, cols, 11, 1.0f / std::sqrt(float(cols)))).to_format(format);
            const MatrixRM<float> x = random_matrix(n + 2, cols + 5, 12);  // a block with an outer stride
            const auto xb = x.topLeftCorner(n, cols);
            const MatrixRM<float> expected = rounded_for(format, xb) * widened(w).transpose();
            MatrixRM<float> out = MatrixRM<float>::Constant(n + 1, rows + 3, 99.0f);
            kernels::linear(xb, w, out.topLeftCorner(n, rows), work);
            CHECK(max_abs(out.topLeftCorner(n, rows), expected) <= 3e-5);
            CHECK((out.rightCols(3).array() == 99.0f).all());  // nothing outside the block is written
            CHECK((out.bottomRows(1).array() == 99.0f).all());
          }
        }
      }
    }
  }
}

TEST_CASE("tied matrix in bf16, q8, f32_panels and q4: one tensor for lookup and lm_head") {
  for (WeightFormat format : {WeightFormat::BF16, WeightFormat::Q8, WeightFormat::F32Panels, WeightFormat::Q4}) {
    const MatrixRM<float> e = random_matrix(50, 64, 3);
    Embedding<float> tied(Weight<float>::owned(e).to_format(format));
    CHECK(tied.weight().format() == format);
    const RowVector<float> row = tied.lookup(7);
    RowVector<float> expected(64);
    tied.weight().row_to(7, expected.data());
    CHECK(row == expected);
    // Within half a step of the largest weight of a block: 1/254 of it in q8, 1/16 in q4.
    CHECK((row - e.row(7)).cwiseAbs().maxCoeff() < (format == WeightFormat::Q4 ? 0.3 : 0.05));
    // lm_head of the looked-up row scores that row highest.
    const RowVector<float> logits = tied.logits(row);
    Index best = -1;
    logits.maxCoeff(&best);
    CHECK(best == 7);
    CHECK_THROWS_AS(tied.mutable_weight(), Error);
  }
}

TEST_CASE("random models: bf16, q8 and q4 logits stay near f32; the tied matrix is one tensor in every format") {
  // (On a CPU whose kernels ask for it, the f32 models here are held in f32_panels.)
  Config c = Config::minimind2_small();
  c.num_hidden_layers = 2;
  const auto f32 = MiniMindForCausalLM<float>::random(c, 5);
  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back((i * 977 + 3) % 6400);
  const MatrixRM<float> reference = f32.forward(ids);
  for (WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8, WeightFormat::F32Panels, WeightFormat::Q4}) {
    for (int threads : {1, 2}) {
      CAPTURE(std::string(format_name(format)));
      CAPTURE(threads);
      const auto model = MiniMindForCausalLM<float>::random(c, 5, {format, threads});
      CHECK(model.format() == format);
      CHECK(model.threads() == threads);
      CHECK(model.is_tied());
      CHECK(&model.lm_head() == &model.model.embed_tokens);
      CHECK(model.num_parameters() == f32.num_parameters());
      const MatrixRM<float> got = model.forward(ids);
      const double diff = max_abs(got, reference);
      MESSAGE(std::string(format_name(format)) << " x" << threads << ": max |logit - f32 logit| " << diff);
      CHECK(diff <= (format == WeightFormat::BF16 ? 0.05 : format == WeightFormat::Q8 ? 0.2 : format == WeightFormat::Q4 ? 1.0 : 1e-4));
      // Cached decode agrees with the full recompute in every format.
      auto session = model.new_session(static_cast<Index>(ids.size()));
      double step = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        auto row = model.forward(session, std::span<const int32_t>(&ids[i], 1));
        step = std::max(step, static_cast<double>((row.row(0) - got.row(static_cast<Index>(i))).cwiseAbs().maxCoeff()));
      }
      // q8 rounds activations to integers, so a 1e-7 difference in summation order between the
      // batched and the one-token path can move a value across a rounding boundary.
      CHECK(step <= (format == WeightFormat::Q8 ? 0.1 : format == WeightFormat::Q4 ? 0.5 : 1e-4));
    }
  }
  const auto q8 = MiniMindForCausalLM<float>::random(c, 5, {WeightFormat::Q8, 1});
  CHECK(q8.weight_bytes() < f32.weight_bytes() / 3);
  const auto q4 = MiniMindForCausalLM<float>::random(c, 5, {WeightFormat::Q4, 1});
  CHECK(q4.weight_bytes() < f32.weight_bytes() / 7);
}

namespace {
// Whether this CPU's AVX-512 bf16 decode widens by zero-extension (simd.hpp).
bool bf16_decode_extended() {
#if MINIMIND_HAS_AVX512
  return kernels::decode_bf16_extended();
#else
  return false;
#endif
}
}  // namespace

TEST_CASE("linear(): below the GEMM a position gets bit for bit the same in any batch, and what it gets alone, on every target") {
  for (const kernels::Kernels* k : runnable_targets()) {
    CAPTURE(std::string(k->name));
    for (WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8, WeightFormat::F32Panels, WeightFormat::Q4}) {
      // f32 on AVX-512 multiplies a batch in register tiles, one FMA chain per product, and one
      // position alone in four chains: there the two differ by rounding. So does bf16 where its
      // decode widens by zero-extension (the tiles keep pair order).
      const bool tiled = (format == WeightFormat::F32 || (format == WeightFormat::BF16 && bf16_decode_extended())) &&
                         std::string_view(k->name) == "avx512";
      // f32_panels sums every product in one chain whatever the positions: the same through the
      // GEMM too, where it hands its packed positions to the same products (x86 targets).
      const bool x86 = std::string_view(k->name) == "avx512" || std::string_view(k->name) == "avx2";
      const Index up_to = format == WeightFormat::F32Panels && x86 ? 40 : k->gemm_from(format);
      kernels::ThreadPool pool(2);
      kernels::Workspace work;
      work.pool = &pool;
      work.kernels = k;
      for (Index cols : {17, 100, 200}) {  // every tail: whole vectors, a part of one
        const Weight<float> w = Weight<float>::owned(random_matrix(70, cols, 41, 0.1f)).to_format(format);
        for (Index n = 2; n < up_to; ++n) {
          CAPTURE(std::string(format_name(format)));
          CAPTURE(cols);
          CAPTURE(n);
          const MatrixRM<float> x = random_matrix(n, cols, 42);
          MatrixRM<float> y(n, 70), alone(1, 70), pair(2, 70), two(2, cols);
          kernels::linear(x, w, y, work);
          for (Index i = 0; i < n; ++i) {
            two.row(0) = x.row(i);  // a batch of two, this position first
            two.row(1) = x.row((i + 1) % n);
            kernels::linear(two, w, pair, work);
            CHECK((y.row(i).array() == pair.row(0).array()).all());
            kernels::linear(x.middleRows(i, 1), w, alone, work);
            if (tiled) CHECK((y.row(i) - alone.row(0)).cwiseAbs().maxCoeff() <= 1e-5f);
            else CHECK((y.row(i).array() == alone.row(0).array()).all());
          }
        }
      }
    }
  }
}

TEST_CASE("AVX-512 f32 decode tiles: each sum is one FMA chain per lane, then the lanes folded 8, 4, 2 and 1 apart, bit for bit") {
  const kernels::Kernels* avx512 = runnable_target("avx512");
  if (!avx512) {
    MESSAGE("skipped: this CPU has no AVX-512");
    return;
  }
  // What the register tiles (f32.hpp: dot_tile, simd.hpp: store_sums) compute, in scalar code.
  auto tile_sum = [](const float* w, const float* x, Index cols) {
    float lane[16] = {};
    for (Index c = 0; c < cols; ++c) lane[c % 16] = std::fma(w[c], x[c], lane[c % 16]);
    for (int half = 8; half >= 1; half /= 2)
      for (int i = 0; i < half; ++i) lane[i] += lane[i + half];
    return lane[0];
  };
  kernels::Workspace work;
  work.kernels = avx512;
  for (Index cols : {16, 45, 512}) {
    const Weight<float> w = Weight<float>::owned(random_matrix(29, cols, 51, 0.1f));
    for (Index n = 2; n < work.kernels->gemm_from(WeightFormat::F32); ++n) {  // every pass and tile shape
      CAPTURE(cols);
      CAPTURE(n);
      const MatrixRM<float> x = random_matrix(n, cols, 52);
      MatrixRM<float> y(n, 29);
      kernels::linear(x, w, y, work);
      Index same = 0;
      for (Index i = 0; i < n; ++i)
        for (Index r = 0; r < 29; ++r) same += y(i, r) == tile_sum(w.matrix().row(r).data(), x.row(i).data(), cols);
      CHECK(same == n * 29);
    }
  }
}

TEST_CASE("f32_panels: 16 rows per panel stored k-major, the last panel padded with zero rows") {
  const MatrixRM<float> m = random_matrix(37, 21, 61);
  const Weight<float> w = Weight<float>::owned(m).to_format(WeightFormat::F32Panels);
  CHECK(w.format() == WeightFormat::F32Panels);
  CHECK(w.bytes() == 3 * 16 * 21 * sizeof(float));
  CHECK_THROWS_AS(w.matrix(), Error);  // not row-major: only row_to and the kernels read it
  const auto v = w.format_view<kernels::f32_panels::Format>();
  for (Index r = 0; r < 48; ++r)
    for (Index c = 0; c < 21; ++c) CHECK(v.data[((r / 16) * 21 + c) * 16 + r % 16] == (r < 37 ? m(r, c) : 0.0f));
  CHECK(widened(w) == m);
}

TEST_CASE("f32_panels on AVX-512: each product is one FMA chain over k in order, bit for bit, for 1 to 40 positions") {
  const kernels::Kernels* avx512 = runnable_target("avx512");
  if (!avx512) {
    MESSAGE("skipped: this CPU has no AVX-512");
    return;
  }
  auto chain = [](const float* w, const float* x, Index cols) {
    float sum = 0;
    for (Index c = 0; c < cols; ++c) sum = std::fma(w[c], x[c], sum);
    return sum;
  };
  kernels::ThreadPool pool(2);
  kernels::Workspace work;
  work.pool = &pool;
  work.kernels = avx512;
  for (Index cols : {5, 64, 300}) {
    const MatrixRM<float> m = random_matrix(70, cols, 53, 0.1f);
    const Weight<float> w = Weight<float>::owned(m).to_format(WeightFormat::F32Panels);
    for (Index n = 1; n <= 40; ++n) {  // decode (1, few, groups of 16) and the GEMM's panels from 32
      CAPTURE(cols);
      CAPTURE(n);
      const MatrixRM<float> x = random_matrix(n, cols, 54);
      MatrixRM<float> y(n, 70);
      kernels::linear(x, w, y, work);
      Index same = 0;
      for (Index i = 0; i < n; ++i)
        for (Index r = 0; r < 70; ++r) same += y(i, r) == chain(m.row(r).data(), x.row(i).data(), cols);
      CHECK(same == n * 70);
    }
  }
}

TEST_CASE("decode inputs: several positions are read from rows on cache lines, whatever rows the caller has") {
  kernels::Workspace work;
  const Index cols = 40, n = 3;
  LineVector<float> buffer(static_cast<size_t>(n * 64 + 16));
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>(i);
  const auto on_line = [](const float* p, Index stride) {
    return reinterpret_cast<uintptr_t>(p) % kCacheLine == 0 && (stride * sizeof(float)) % kCacheLine == 0;
  };
  const auto plain = kernels::Workspace::Needs::of<kernels::f32::Format>();
  // Rows 4 floats off a line, then rows 41 apart: each is copied onto a line of its own.
  for (const auto& [x, stride] : {std::pair{buffer.data() + 4, Index{64}}, std::pair{buffer.data(), Index{41}}}) {
    const auto [read, read_stride] = work.prepare(x, stride, n, cols, plain);
    CHECK(on_line(read, read_stride));
    for (Index i = 0; i < n; ++i) CHECK(std::equal(x + i * stride, x + i * stride + cols, read + i * read_stride));
  }
  // Rows already on lines, and one position alone (it streams the weights; x stays in L1): as they are.
  CHECK(work.prepare(buffer.data(), 64, n, cols, plain) == std::pair<const float*, Index>{buffer.data(), 64});
  CHECK(work.prepare(buffer.data() + 4, 64, 1, cols, plain) == std::pair<const float*, Index>{buffer.data() + 4, 64});
  // Nor for formats that read only their own forms of x (q8's blocks): nothing to copy.
  const auto quantized = kernels::Workspace::Needs::of<kernels::q8::Format>();
  CHECK(work.prepare(buffer.data() + 4, 64, n, cols, quantized) == std::pair<const float*, Index>{buffer.data() + 4, 64});
  // Through linear(): the same bits from rows off their lines as from a copy on them.
  const Weight<float> w = Weight<float>::owned(random_matrix(30, cols, 43, 0.1f));
  const MatrixRM<float> x = random_matrix(n, cols, 44);
  MatrixRM<float> wide = MatrixRM<float>::Zero(n, cols + 1), y(n, 30), y_off(n, 30);
  wide.leftCols(cols) = x;
  kernels::linear(x, w, y, work);
  kernels::linear(wide.leftCols(cols), w, y_off, work);
  CHECK((y.array() == y_off.array()).all());
}

TEST_CASE("linear_each(): several weights of one input give what one linear() each gives, on every target") {
  // Decode (below Kernels::gemm_from: 13 positions, 32 for f32 on AVX-512) and prefill
  // (gemm_each: one pack, the rows of all three in one dispatch, here 130 rows = 3 chunks of 48,
  // 40, 17); some pairs mix formats that read different inputs.
  const std::pair<WeightFormat, WeightFormat> pairs[] = {{WeightFormat::F32, WeightFormat::F32},
                                                         {WeightFormat::BF16, WeightFormat::BF16},
                                                         {WeightFormat::Q8, WeightFormat::Q8},
                                                         {WeightFormat::Q8, WeightFormat::F32},
                                                         {WeightFormat::F32Panels, WeightFormat::F32Panels},
                                                         {WeightFormat::F32Panels, WeightFormat::Q8},
                                                         {WeightFormat::Q4, WeightFormat::Q4},
                                                         {WeightFormat::Q4, WeightFormat::Q8},
                                                         {WeightFormat::Q4, WeightFormat::F32}};
  for (const kernels::Kernels* k : runnable_targets()) {
    CAPTURE(k->name);
    for (const auto& formats : pairs) {
      for (int threads : {1, 2, 3}) {
        kernels::ThreadPool pool(threads);
        kernels::Workspace work;
        work.pool = &pool;
        work.kernels = k;
        for (Index n : {1, 2, 5, 8, 9, 33}) {
          CAPTURE(std::string(format_name(formats.first)));
          CAPTURE(std::string(format_name(formats.second)));
          CAPTURE(threads);
          CAPTURE(n);
          const Weight<float> a = Weight<float>::owned(random_matrix(130, 64, 21, 0.1f)).to_format(formats.first);
          const Weight<float> b = Weight<float>::owned(random_matrix(40, 64, 22, 0.1f)).to_format(formats.second);
          const Weight<float> c = Weight<float>::owned(random_matrix(17, 64, 23, 0.1f)).to_format(formats.first);
          const MatrixRM<float> x = random_matrix(n, 64, 24);
          // All three outputs are blocks of one buffer, as q, k and v are of the activations.
          MatrixRM<float> y = MatrixRM<float>::Constant(n, 130 + 40 + 17 + 1, 99.0f);
          auto ya = y.middleCols(0, 130), yb = y.middleCols(130, 40), yc = y.middleCols(170, 17);
          MatrixRM<float> ea(n, 130), eb(n, 40), ec(n, 17);
          kernels::linear_each(x, work, std::tie(a, ya), std::tie(b, yb), std::tie(c, yc));
          kernels::linear(x, a, ea, work);
          kernels::linear(x, b, eb, work);
          kernels::linear(x, c, ec, work);
          CHECK(max_abs(ya, ea) <= 1e-6);
          CHECK(max_abs(yb, eb) <= 1e-6);
          CHECK(max_abs(yc, ec) <= 1e-6);
          CHECK((y.rightCols(1).array() == 99.0f).all());  // nothing outside the blocks is written
        }
      }
    }
  }
}

namespace {
// A product at the largest magnitudes a format holds: got as its reference computes (within
// epsilon), and within 1e-3 of the exact product of m and x (rounding only the scales).
void check_extremes(const MatrixRM<float>& m, const std::vector<float>& x, const std::vector<float>& ref,
                    const std::vector<float>& got, double epsilon) {
  for (Index r = 0; r < m.rows(); ++r) {
    double exact = 0;
    for (Index c = 0; c < m.cols(); ++c) exact += static_cast<double>(m(r, c)) * x[static_cast<size_t>(c)];
    CHECK(got[static_cast<size_t>(r)] == doctest::Approx(ref[static_cast<size_t>(r)]).epsilon(epsilon));
    CHECK(got[static_cast<size_t>(r)] == doctest::Approx(exact).epsilon(1e-3));
  }
}
}  // namespace

TEST_CASE("q8 matvec of every target: blocks at the largest magnitudes sum exactly (no int32 overflow, exact float lanes)") {
  // Every weight quantizes to +-127 and every activation to +-32767: the largest block sums.
  const Index rows = 8, cols = 1408;
  MatrixRM<float> m(rows, cols);
  std::vector<float> x(static_cast<size_t>(cols));
  for (Index c = 0; c < cols; ++c) {
    for (Index r = 0; r < rows; ++r) m(r, c) = (r % 2 == 0 || c % 3 == 0) ? 1.0f : -1.0f;
    x[static_cast<size_t>(c)] = c % 5 == 0 ? -2.0f : 2.0f;
  }
  const Weight<float> q = Weight<float>::owned(m).to_format(WeightFormat::Q8);
  const Index blocks = kernels::q8::blocks_for(cols);
  for (const kernels::Kernels* k : runnable_targets()) {
    CAPTURE(k->name);
    std::vector<int16_t> xq(static_cast<size_t>(blocks * 32));
    std::vector<float> xd(static_cast<size_t>(blocks));
    k->quantize_activations(x.data(), cols, xq.data(), xd.data());
    for (Index c = 0; c < cols; ++c) CHECK(std::abs(xq[static_cast<size_t>(c)]) == 32767);
    std::vector<float> ref(static_cast<size_t>(rows)), got(static_cast<size_t>(rows));
    kernels::q8::matvec_reference(q.q8_view(), xq.data(), xd.data(), ref.data(), 0, rows);
    matvec<kernels::q8::Format>(*k, q, {x.data(), xq.data(), xd.data()}, got.data(), 0, rows);
    check_extremes(m, x, ref, got, 1e-6);
  }
}

TEST_CASE("q4 matvec of every target: blocks at the extreme levels sum exactly (no int16 saturation in the byte products)") {
  // Levels 0 and 15 (weights -8 and +7 steps) against activations of +-127: the largest pairs.
  const Index rows = 9, cols = 1408;
  MatrixRM<float> m(rows, cols);
  std::vector<float> x(static_cast<size_t>(cols));
  for (Index c = 0; c < cols; ++c) {
    for (Index r = 0; r < rows; ++r) m(r, c) = c % 32 == 0 ? -8.0f : ((r + c) % 3 == 0 ? -8.0f : 7.0f);
    x[static_cast<size_t>(c)] = c % 7 == 0 ? -3.0f : 3.0f;
  }
  const Weight<float> q = Weight<float>::owned(m).to_format(WeightFormat::Q4);
  const kernels::q4::View v = q.format_view<kernels::q4::Format>();
  const Index blocks = kernels::q4::blocks_for(cols);
  for (const kernels::Kernels* k : runnable_targets()) {
    CAPTURE(k->name);
    std::vector<int8_t> x8(static_cast<size_t>(blocks * 32));
    std::vector<float> xd(static_cast<size_t>(blocks));
    std::vector<int32_t> xs(static_cast<size_t>(blocks));
    k->quantize_activations_int8(x.data(), cols, x8.data(), xd.data(), xs.data());
    for (Index c = 0; c < cols; ++c) CHECK(std::abs(x8[static_cast<size_t>(c)]) == 127);
    std::vector<float> ref(static_cast<size_t>(rows)), got(static_cast<size_t>(rows));
    kernels::q4::matvec_reference(v, x8.data(), xd.data(), ref.data(), 0, rows);
    const kernels::DecodeInput in{x.data(), nullptr, nullptr, x8.data(), xd.data(), xs.data()};
    matvec<kernels::q4::Format>(*k, q, in, got.data(), 0, rows);
    check_extremes(m, x, ref, got, 1e-5);
  }
}

namespace {

// An activation quantizer (q8's int16 or q4's int8 blocks) on blocks that are tiny, zero or
// non-finite: quantize(x, cols, q, &d).
template <class Q, class Quantize>
void check_awkward_blocks(Quantize quantize) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (const Index cols : {Index{8}, Index{32}}) {  // the scalar tail path and the AVX2 full block
    CAPTURE(cols);
    // 32767 / denorm_min overflows: a zero next to it made 0 * inf = NaN before the fix.
    std::vector<float> x(static_cast<size_t>(cols), 0.0f);
    x[1] = tiny;
    x[2] = -tiny;
    std::vector<Q> q(32, 99);
    float d = -1;
    quantize(x.data(), cols, q.data(), &d);
    CHECK(d == 0.0f);
    for (const Q v : q) CHECK(v == 0);
    // Non-finite activations keep the block's product non-finite (the sampler refuses it).
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      x.assign(static_cast<size_t>(cols), 1.0f);
      x[3] = bad;
      quantize(x.data(), cols, q.data(), &d);
      CHECK_FALSE(std::isfinite(d));
    }
  }
}

}  // namespace

TEST_CASE("q8 and q4 activations on every target: tiny, zero and non-finite blocks never convert NaN to an integer (fuzz_safetensors finding)") {
  for (const kernels::Kernels* k : runnable_targets()) {
    CAPTURE(k->name);
    check_awkward_blocks<int16_t>([&](const float* x, Index cols, int16_t* q, float* d) { k->quantize_activations(x, cols, q, d); });
    check_awkward_blocks<int8_t>([&](const float* x, Index cols, int8_t* q, float* d) {
      int32_t sum = -1;
      k->quantize_activations_int8(x, cols, q, d, &sum);
      CHECK(sum == 0);
    });
  }
}

TEST_CASE("gemm_each() of every target, every format, against the plain product: rows not a multiple of the tile, columns not of a vector, 3..70 positions, 1 to 3 threads") {
  // Tiles are 12 rows x 32 positions (AVX-512) or 6 x 16 (AVX2), in chunks of 48 to 96 rows and
  // blocks of 256 columns: these shapes leave a remainder in each, 300 columns span two blocks,
  // and 797 rows make chunks of 96 on 2 threads.
  for (const kernels::Kernels* k : runnable_targets()) {
    CAPTURE(k->name);
    for (WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8, WeightFormat::F32Panels, WeightFormat::Q4}) {
      for (int threads : {1, 2, 3}) {
        kernels::ThreadPool pool(threads);
        kernels::GemmScratch scratch;
        for (const auto& shape : {std::pair<Index, Index>{1, 40}, {13, 300}, {59, 77}, {100, 33}, {131, 520}, {797, 40}}) {
          const Index rows = shape.first, cols = shape.second;
          const Weight<float> w = Weight<float>::owned(random_matrix(rows, cols, 31, 1.0f / std::sqrt(float(cols)))).to_format(format);
          const MatrixRM<float> plain = widened(w);
          for (Index n : {3, 8, 9, 16, 17, 31, 32, 33, 40, 64, 70}) {
            CAPTURE(std::string(format_name(format)));
            CAPTURE(threads);
            CAPTURE(rows);
            CAPTURE(cols);
            CAPTURE(n);
            const MatrixRM<float> x = random_matrix(n, cols + 3, 32);  // rows with an outer stride
            const auto xb = x.leftCols(cols);
            const MatrixRM<float> expected = rounded_for(format, xb) * plain.transpose();
            MatrixRM<float> y = MatrixRM<float>::Constant(n, rows + 2, 99.0f);
            const kernels::GemmProduct product{&w, y.data(), y.outerStride()};
            k->gemm_each(x.data(), x.outerStride(), n, {&product, 1}, scratch, &pool);
            CHECK(max_abs(y.leftCols(rows), expected) <= 3e-5);
            CHECK((y.rightCols(2).array() == 99.0f).all());
          }
        }
      }
    }
  }
}

TEST_CASE("decode kernels of every target this CPU runs match the references on awkward shapes and row ranges") {
  // The targets by name: run here, compiled but not for this CPU, not in this build.
  std::string ran, not_on_cpu, not_compiled;
  for (const std::string_view name : kernels::kTargetNames) {
    const auto targets = kernels::targets();
    const auto t = std::find_if(targets.begin(), targets.end(), [&](const kernels::Target& c) { return c.kernels->name == name; });
    std::string& list = t == targets.end() ? not_compiled : t->runs ? ran : not_on_cpu;
    list += (list.empty() ? "" : ", ") + std::string(name);
  }
  MESSAGE("decode kernels ran for: " << ran << "; not on this CPU: " << (not_on_cpu.empty() ? "none" : not_on_cpu)
                                     << "; not in this build: " << (not_compiled.empty() ? "none" : not_compiled));
  const auto targets = runnable_targets();
  REQUIRE(!targets.empty());
  CHECK(targets.front() == &kernels::active());  // the best one runs, and linear() uses it
  CHECK(kernels::Workspace{}.kernels == &kernels::active());
  CHECK(std::string_view(kernels::name()) == kernels::active().name);
  CHECK(targets.back()->name == std::string_view("scalar"));
  // Every compiled target is a known one, in the known order (best first).
  size_t known = 0;
  for (const kernels::Target& t : kernels::targets()) {
    while (known < kernels::kTargetNames.size() && kernels::kTargetNames[known] != t.kernels->name) ++known;
    CHECK(known < kernels::kTargetNames.size());
  }
#if MINIMIND_X86_DISPATCH
  // A dispatch build has every x86 target, whatever its flags.
  REQUIRE(kernels::targets().size() == 3);
  CHECK(kernels::targets()[0].kernels->name == std::string_view("avx512"));
  CHECK(kernels::targets()[1].kernels->name == std::string_view("avx2"));
#endif

  for (const kernels::Kernels* k : targets) {
    CAPTURE(k->name);
    for (Index cols : {1, 15, 17, 33, 63, 65, 100, 129, 512, 777, 1408}) {
      for (Index rows : {1, 3, 4, 5, 9, 13, 17, 64}) {
        CAPTURE(rows);
        CAPTURE(cols);
        const MatrixRM<float> m = random_matrix(rows, cols, static_cast<uint32_t>(rows * 7919 + cols), 0.05f);
        const MatrixRM<float> x = random_matrix(1, cols, static_cast<uint32_t>(cols + 3));
        const Weight<float> f = Weight<float>::owned(m);
        const Weight<float> b = f.to_format(WeightFormat::BF16);
        const Weight<float> q = f.to_format(WeightFormat::Q8);
        const Weight<float> q4 = f.to_format(WeightFormat::Q4);
        const Index blocks = kernels::q8::blocks_for(cols);
        std::vector<int16_t> xq(static_cast<size_t>(blocks * 32));
        std::vector<float> xd(static_cast<size_t>(blocks));
        k->quantize_activations(x.data(), cols, xq.data(), xd.data());
        std::vector<int8_t> x8(static_cast<size_t>(blocks * 32));
        std::vector<float> x8_scale(static_cast<size_t>(blocks));
        std::vector<int32_t> x8_sum(static_cast<size_t>(blocks));
        k->quantize_activations_int8(x.data(), cols, x8.data(), x8_scale.data(), x8_sum.data());
        std::vector<float> x_pairs(static_cast<size_t>(cols));
        kernels::bf16::to_pair_order(x.data(), cols, x_pairs.data());
        kernels::DecodeInput in{x.data(), xq.data(), xd.data(), x8.data(), x8_scale.data(), x8_sum.data(), x_pairs.data()};

        // Whole matrix, then ranges that start and end inside groups of four rows.
        for (const auto& range : {std::pair<Index, Index>{0, rows}, {1, rows}, {rows / 2, rows - 1}, {2, rows}}) {
          const Index begin = range.first, end = range.second;  // not a structured binding: clang 14 cannot capture one
          if (begin >= end) continue;
          CAPTURE(begin);
          CAPTURE(end);
          std::vector<float> ref(static_cast<size_t>(rows), -7.0f), got(static_cast<size_t>(rows), -7.0f);
          auto check = [&](const char* format) {
            CAPTURE(format);
            for (Index r = 0; r < rows; ++r) {
              if (r < begin || r >= end) CHECK(got[static_cast<size_t>(r)] == -7.0f);
              else CHECK(got[static_cast<size_t>(r)] == doctest::Approx(ref[static_cast<size_t>(r)]).epsilon(1e-5).scale(1));
            }
            std::fill(got.begin(), got.end(), -7.0f);
          };
          kernels::f32::matvec_reference(m.data(), cols, x.data(), ref.data(), begin, end);
          matvec<kernels::f32::Format>(*k, f, in, got.data(), begin, end);
          check("f32");
          kernels::bf16::matvec_reference(b.bf16_data(), cols, x.data(), ref.data(), begin, end);
          matvec<kernels::bf16::Format>(*k, b, in, got.data(), begin, end);
          check("bf16");
          kernels::q8::matvec_reference(q.q8_view(), xq.data(), xd.data(), ref.data(), begin, end);
          matvec<kernels::q8::Format>(*k, q, in, got.data(), begin, end);
          check("q8");
          kernels::q4::matvec_reference(q4.format_view<kernels::q4::Format>(), x8.data(), x8_scale.data(), ref.data(), begin, end);
          matvec<kernels::q4::Format>(*k, q4, in, got.data(), begin, end);
          check("q4");
        }
      }
    }
  }
}

#if MINIMIND_HAS_AVX512
TEST_CASE("AVX-512 decode products: asking for the weights ahead (decode_prefetch_ahead) changes no bit; both bf16 widenings") {
  if (!kernels::x86_features().avx512) {
    MESSAGE("skipped: this CPU has no AVX-512");
    return;
  }
  MESSAGE("decode prefetch on this CPU: " << kernels::decode_prefetch_ahead() << " bytes ahead");
  CHECK((kernels::decode_prefetch_ahead() == 0 || kernels::decode_prefetch_ahead() == kernels::kDecodePrefetchAhead ||
         kernels::decode_prefetch_ahead() == kernels::kDecodePrefetchAheadZen5));
  // Each distance a CPU may be given.
  for (uintptr_t kAhead : {kernels::kDecodePrefetchAhead, kernels::kDecodePrefetchAheadZen5}) {
    for (Index cols : {17, 100, 512, 777}) {
      CAPTURE(kAhead);
      CAPTURE(cols);
      const Index rows = 8;
      const MatrixRM<float> m = random_matrix(rows, cols, static_cast<uint32_t>(cols * 31), 0.05f);
      const MatrixRM<float> x = random_matrix(1, cols, static_cast<uint32_t>(cols + 5));
      for (Index r = 0; r < rows; ++r) {
        const float* w = m.data() + r * cols;
        CHECK(kernels::f32::avx512::dot(w, x.data(), cols, kAhead) == kernels::f32::avx512::dot(w, x.data(), cols, 0));
      }
      const Weight<float> b = Weight<float>::owned(m).to_format(WeightFormat::BF16);
      std::vector<float> x_pairs(static_cast<size_t>(cols));
      kernels::bf16::to_pair_order(x.data(), cols, x_pairs.data());
      // Both ways of widening (decode_bf16_extended picks one per CPU), against the reference.
      MESSAGE("bf16 decode on this CPU: " << std::string(kernels::decode_bf16_extended() ? "zero-extended" : "pair order"));
      for (Index r = 0; r < rows; ++r) {
        const uint16_t* w = b.bf16_data() + r * cols;
        float ref = 0;
        kernels::bf16::matvec_reference(w, cols, x.data(), &ref, 0, 1);
        const float pairs = kernels::bf16::avx512::dot(w, x.data(), x_pairs.data(), cols, kAhead);
        const float extended = kernels::bf16::avx512::dot_extended(w, x.data(), cols, kAhead);
        CHECK(pairs == kernels::bf16::avx512::dot(w, x.data(), x_pairs.data(), cols, 0));
        CHECK(extended == kernels::bf16::avx512::dot_extended(w, x.data(), cols, 0));
        CHECK(pairs == doctest::Approx(ref).epsilon(1e-5).scale(1));
        CHECK(extended == doctest::Approx(ref).epsilon(1e-5).scale(1));
      }
      const Weight<float> q = Weight<float>::owned(m).to_format(WeightFormat::Q8);
      const Index blocks = kernels::q8::blocks_for(cols);
      std::vector<int16_t> xq(static_cast<size_t>(blocks * 32));
      std::vector<float> xd(static_cast<size_t>(blocks));
      kernels::q8::avx512::quantize_activations(x.data(), cols, xq.data(), xd.data());
      std::vector<float> with(rows), without(rows);
      for (Index r = 0; r < rows; r += kernels::q8::kGroup) {
        kernels::q8::avx512::group(q.q8_view(), r, xq.data(), xd.data(), with.data(), kAhead);
        kernels::q8::avx512::group(q.q8_view(), r, xq.data(), xd.data(), without.data(), 0);
      }
      CHECK(with == without);
    }
  }
}
#endif

#if MINIMIND_HAS_AVX512
TEST_CASE("AVX-512 q4 products: with VNNI (vpdpbusd) and without (vpmaddubsw), the same bits, with and without prefetch") {
  if (!kernels::x86_features().avx512) {
    MESSAGE("skipped: this CPU has no AVX-512");
    return;
  }
  const bool vnni = kernels::cpu_features().avx512vnni;
  MESSAGE("q4 on this CPU: " << std::string(vnni ? "VNNI (both kernels run)" : "no VNNI (vpmaddubsw only)"));
  for (Index cols : {32, 100, 512, 1408}) {
    CAPTURE(cols);
    const Index rows = 12;
    const MatrixRM<float> m = random_matrix(rows, cols, static_cast<uint32_t>(cols * 17), 0.05f);
    const MatrixRM<float> x = random_matrix(1, cols, static_cast<uint32_t>(cols + 9));
    const Weight<float> q = Weight<float>::owned(m).to_format(WeightFormat::Q4);
    const kernels::q4::View v = q.format_view<kernels::q4::Format>();
    const Index blocks = kernels::q4::blocks_for(cols);
    std::vector<int8_t> x8(static_cast<size_t>(blocks * 32));
    std::vector<float> xd(static_cast<size_t>(blocks)), ref(rows);
    std::vector<int32_t> xs(static_cast<size_t>(blocks));
    kernels::q4::avx512::quantize_activations(x.data(), cols, x8.data(), xd.data(), xs.data());
    kernels::q4::matvec_reference(v, x8.data(), xd.data(), ref.data(), 0, rows);
    std::vector<float> plain(rows), ahead(rows), with_vnni(rows);
    for (Index r = 0; r < rows; r += kernels::q4::kGroup) {
      kernels::q4::avx512::group_of<false>(v, r, x8.data(), xd.data(), xs.data(), plain.data(), 0);
      kernels::q4::avx512::group_of<false>(v, r, x8.data(), xd.data(), xs.data(), ahead.data(), kernels::kDecodePrefetchAheadZen5);
      if (vnni) kernels::q4::avx512::group_of<true>(v, r, x8.data(), xd.data(), xs.data(), with_vnni.data(), 0);
    }
    CHECK(plain == ahead);
    if (vnni) CHECK(plain == with_vnni);
    for (Index r = 0; r < rows; ++r) CHECK(plain[static_cast<size_t>(r)] == doctest::Approx(ref[static_cast<size_t>(r)]).epsilon(1e-5).scale(1));
  }
}
#endif

namespace {

// A 128-bit target's dot products (the target sections for kernels/neon.hpp and
// kernels/wasm_simd128.hpp) against the scalar references, on lengths that leave every tail: f32
// on multiples of 4, bf16 of 8, each then with its own tail; q8 rows of 1 to 9 blocks, in grouped
// rows (blocks 128 bytes apart) and the rows after the last group.
template <class F32Dot, class Bf16Dot, class Q8BlocksDot, class Q8RowDot>
void check_128bit_dots(F32Dot f32_dot, Bf16Dot bf16_dot, Q8BlocksDot q8_blocks_dot, Q8RowDot q8_row_dot) {
  for (Index cols : {1, 3, 4, 7, 8, 12, 15, 16, 20, 31, 33, 64, 100, 257, 1027}) {
    CAPTURE(cols);
    const MatrixRM<float> m = random_matrix(5, cols, static_cast<uint32_t>(cols), 0.05f);
    const MatrixRM<float> x = random_matrix(1, cols, static_cast<uint32_t>(cols + 1));
    float ref = 0;
    kernels::f32::matvec_reference(m.data(), cols, x.data(), &ref, 0, 1);
    CHECK(f32_dot(m.data(), x.data(), cols / 4 * 4) + kernels::f32::scalar::dot(m.data() + cols / 4 * 4, x.data() + cols / 4 * 4, cols % 4) ==
          doctest::Approx(ref).epsilon(1e-5).scale(1));
    CHECK(f32_dot(m.data(), x.data(), cols) == doctest::Approx(ref).epsilon(1e-5).scale(1));

    const Weight<float> b = Weight<float>::owned(m).to_format(WeightFormat::BF16);
    kernels::bf16::matvec_reference(b.bf16_data(), cols, x.data(), &ref, 0, 1);
    const Index whole = cols / 8 * 8;
    CHECK(bf16_dot(b.bf16_data(), x.data(), whole) + kernels::bf16::scalar::dot(b.bf16_data() + whole, x.data() + whole, cols % 8) ==
          doctest::Approx(ref).epsilon(1e-5).scale(1));
    CHECK(bf16_dot(b.bf16_data(), x.data(), cols) == doctest::Approx(ref).epsilon(1e-5).scale(1));
  }
  for (Index blocks = 1; blocks <= 9; ++blocks) {
    const Index cols = blocks * 32 - 5;  // the last block zero padded
    CAPTURE(cols);
    const MatrixRM<float> m = random_matrix(5, cols, static_cast<uint32_t>(blocks), 0.05f);
    const MatrixRM<float> x = random_matrix(1, cols, static_cast<uint32_t>(blocks + 100));
    const Weight<float> q = Weight<float>::owned(m).to_format(WeightFormat::Q8);
    const kernels::q8::View w = q.q8_view();
    std::vector<int16_t> xq(static_cast<size_t>(blocks * 32));
    std::vector<float> xd(static_cast<size_t>(blocks));
    kernels::q8::scalar::quantize_activations(x.data(), cols, xq.data(), xd.data());
    std::vector<float> ref(5);
    kernels::q8::matvec_reference(w, xq.data(), xd.data(), ref.data(), 0, 5);
    for (Index r = 0; r < 5; ++r) {
      CAPTURE(r);
      const Index stride = r < 4 ? 4 * 32 : 32;  // row 4 follows the one group of four
      CHECK(q8_blocks_dot(kernels::q8::block_ptr(w, r, 0), stride, w.d + r * blocks, xq.data(), xd.data(), blocks) ==
            doctest::Approx(ref[static_cast<size_t>(r)]).epsilon(1e-5).scale(1));
      CHECK(q8_row_dot(w, r, xq.data(), xd.data()) == doctest::Approx(ref[static_cast<size_t>(r)]).epsilon(1e-5).scale(1));
    }
  }
}

}  // namespace

namespace {

// A 128-bit target's q4 dot (kernels/neon.hpp, kernels/wasm_simd128.hpp) against the scalar
// reference: rows of 1 to 9 blocks, grouped (blocks 4 apart) and after the last group.
template <class Q4BlocksDot, class Q4RowDot>
void check_128bit_q4_dots(Q4BlocksDot q4_blocks_dot, Q4RowDot q4_row_dot) {
  for (Index blocks = 1; blocks <= 9; ++blocks) {
    const Index cols = blocks * 32 - 5;  // the last block zero padded
    CAPTURE(cols);
    const MatrixRM<float> m = random_matrix(5, cols, static_cast<uint32_t>(blocks + 7), 0.05f);
    const MatrixRM<float> x = random_matrix(1, cols, static_cast<uint32_t>(blocks + 200));
    const Weight<float> q = Weight<float>::owned(m).to_format(WeightFormat::Q4);
    const kernels::q4::View w = q.format_view<kernels::q4::Format>();
    std::vector<int8_t> x8(static_cast<size_t>(blocks * 32));
    std::vector<float> xd(static_cast<size_t>(blocks));
    std::vector<int32_t> xs(static_cast<size_t>(blocks));
    kernels::q4::scalar::quantize_activations(x.data(), cols, x8.data(), xd.data(), xs.data());
    std::vector<float> ref(5);
    kernels::q4::matvec_reference(w, x8.data(), xd.data(), ref.data(), 0, 5);
    for (Index r = 0; r < 5; ++r) {
      CAPTURE(r);
      const Index first = kernels::q4::block_index(w, r, 0), stride = r < 4 ? 4 : 1;
      CHECK(q4_blocks_dot(w.q + first * 16, w.d + first, stride, x8.data(), xd.data(), blocks) ==
            doctest::Approx(ref[static_cast<size_t>(r)]).epsilon(1e-5).scale(1));
      CHECK(q4_row_dot(w, r, x8.data(), xd.data(), xs.data()) == doctest::Approx(ref[static_cast<size_t>(r)]).epsilon(1e-5).scale(1));
    }
  }
}

}  // namespace

TEST_CASE("NEON dot products (aarch64) match the scalar references on every tail") {
#if MINIMIND_HAS_NEON
  check_128bit_dots([](const float* w, const float* x, Index cols) { return kernels::f32::neon::dot(w, x, cols); },
                    kernels::bf16::neon::dot, kernels::neon::q8_dot, kernels::q8::neon::dot);
  check_128bit_q4_dots(kernels::neon::q4_dot, kernels::q4::neon::dot);
  MESSAGE("ran: NEON kernels (q4 and ggml " << std::string(kernels::neon::kQ4Sdot ? "with" : "without") << " sdot)");
#else
  MESSAGE("not run: NEON kernels (this build is not for aarch64)");
#endif
}

TEST_CASE("WebAssembly SIMD128 dot products match the scalar references on every tail") {
#if MINIMIND_HAS_WASM_SIMD
  check_128bit_dots([](const float* w, const float* x, Index cols) { return kernels::f32::wasm_simd128::dot(w, x, cols); },
                    kernels::bf16::wasm_simd128::dot, kernels::wasm_simd128::q8_dot, kernels::q8::wasm_simd128::dot);
  check_128bit_q4_dots(kernels::wasm_simd128::q4_dot, kernels::q4::wasm_simd128::dot);
  MESSAGE("ran: WebAssembly SIMD128 kernels");
#else
  MESSAGE("not run: WebAssembly SIMD128 kernels (this build is not for wasm with -msimd128)");
#endif
}

TEST_CASE("silu_mul of every target: within 2e-7 (relative; 1e-35 absolute, for gates below -87) of the double formula, NaN stays NaN") {
  std::vector<float> gate = {0.0f, 1.0f, -1.0f, 3.5f, -3.5f, 20.0f, -20.0f, 87.5f, -87.5f, 100.0f, -100.0f, 1e-30f};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  while (gate.size() < 301) gate.push_back(normal(rng));
  const std::vector<float> up = [&] {
    std::vector<float> u(gate.size());
    for (float& v : u) v = normal(rng);
    return u;
  }();
  for (const kernels::Kernels* k : runnable_targets()) {
    CAPTURE(std::string(k->name));
    for (const Index n : {Index{1}, Index{7}, Index{16}, Index{17}, Index{300}}) {  // whole vectors and tails
      CAPTURE(n);
      std::vector<float> g = gate;
      k->silu_mul(g.data(), up.data(), n);
      for (Index c = 0; c < n; ++c) {
        const size_t i = static_cast<size_t>(c);
        const double x = gate[i], expected = x / (1 + std::exp(-x)) * up[i];
        CAPTURE(x);
        CHECK(std::abs(g[i] - expected) <= 2e-7 * std::abs(expected) + 1e-35);
      }
      CHECK(g[static_cast<size_t>(n)] == gate[static_cast<size_t>(n)]);  // nothing past n is written
    }
    std::vector<float> nan_gate(20, std::numeric_limits<float>::quiet_NaN()), ones(20, 1.0f);
    k->silu_mul(nan_gate.data(), ones.data(), 20);
    CHECK(std::all_of(nan_gate.begin(), nan_gate.end(), [](float v) { return std::isnan(v); }));
  }
}

// Keys and values in the KV cache's blocks of positions, the blocks stored in reverse order (the
// table undoes it) or in order.
struct BlockedRows {
  static constexpr Index B = KVCache<float>::kBlockPositions;
  MatrixRM<float> keys, values;
  std::vector<int32_t> table;
  BlockedRows(const MatrixRM<float>& k, const MatrixRM<float>& v, bool reversed) {
    const Index blocks = (k.rows() + B - 1) / B;
    keys = values = MatrixRM<float>::Constant(blocks * B, k.cols(), std::numeric_limits<float>::quiet_NaN());
    for (Index b = 0; b < blocks; ++b) {
      const Index stored = reversed ? blocks - 1 - b : b, rows = std::min(B, k.rows() - b * B);
      table.push_back(static_cast<int32_t>(stored));
      keys.middleRows(stored * B, rows) = k.middleRows(b * B, rows);
      values.middleRows(stored * B, rows) = v.middleRows(b * B, rows);
    }
  }
  kernels::KVBlocks<float> view() const { return {keys.data(), values.data(), table.data(), B, B * keys.cols()}; }
};

// With the scratch (`panels`), blocks of 8 or more queries whose heads are whole panels wide
// (64, 96) go through the x86 targets' register tiles (attend_tiled), the rest row by row; 9 x 300
// crosses a block of values (kernels::kAttentionValueKeys) and ends inside a panel of keys.
TEST_CASE("attend_heads of every target: causal softmax(q k^T * scale) v of each head against the double formula") {
  for (const kernels::Kernels* k : runnable_targets()) {
    for (const Index head_dim : {Index{64}, Index{96}, Index{5}, Index{40}}) {
      LineVector<float> panels(static_cast<size_t>(kernels::attention_panel_floats(head_dim)));
      for (const Index heads : {Index{1}, Index{2}, Index{4}, Index{7}}) {  // 7: a group of 4, then 3
        for (const auto& shape : {std::pair<Index, Index>{1, 1}, {1, 300}, {3, 1}, {17, 9}, {32, 100}, {9, 300}}) {
          for (const bool with_panels : {false, true}) {
            const Index m = shape.first, fv = shape.second;  // rows, and the keys the first row sees
            CAPTURE(std::string(k->name));
            CAPTURE(head_dim);
            CAPTURE(heads);
            CAPTURE(m);
            CAPTURE(fv);
            CAPTURE(with_panels);
            const Index reach = fv + m - 1;
            const MatrixRM<float> q = random_matrix(m, heads * head_dim + 3, 21);  // rows with an outer stride
            const MatrixRM<float> keys = random_matrix(reach, head_dim, 22), values = random_matrix(reach, head_dim, 23);
            const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
            const BlockedRows reversed(keys, values, true), in_order(keys, values, false);
            MatrixRM<float> scores = MatrixRM<float>::Constant(heads * m, reach + 2, 99.0f), in_order_scores = scores;
            MatrixRM<float> out = MatrixRM<float>::Constant(m, heads * head_dim + 1, 99.0f), in_order_out = out;
            for (auto [rows, s, o] : {std::tuple{&reversed, &scores, &out}, {&in_order, &in_order_scores, &in_order_out}}) {
              k->attend_heads({.q = q.data(), .q_stride = q.cols(), .m = m, .heads = heads, .first_visible = fv,
                               .kv = rows->view(), .head_dim = head_dim, .scale = scale, .scores = s->data(),
                               .scores_stride = s->cols(), .out = o->data(), .out_stride = o->cols(),
                               .panels = with_panels ? panels.data() : nullptr});
            }
            // Where the blocks lie changes nothing: the same keys in the same order.
            CHECK(scores == in_order_scores);
            CHECK(out == in_order_out);
            double worst_p = 0, worst_out = 0;
            for (Index g = 0; g < heads; ++g) {
              for (Index i = 0; i < m; ++i) {
                const Index visible = fv + i;
                std::vector<double> p(static_cast<size_t>(visible));
                double top = -1e300, sum = 0;
                for (Index j = 0; j < visible; ++j) {
                  double s = 0;
                  for (Index c = 0; c < head_dim; ++c) s += double(q(i, g * head_dim + c)) * keys(j, c);
                  p[static_cast<size_t>(j)] = s;
                  top = std::max(top, s);
                }
                for (double& v : p) sum += v = std::exp((v - top) * scale);
                for (Index j = 0; j < reach; ++j) {
                  const double expected = j < visible ? p[static_cast<size_t>(j)] / sum : 0.0;
                  worst_p = testing::worse(worst_p, std::abs(scores(g * m + i, j) - expected));
                  if (j >= visible) CHECK(scores(g * m + i, j) == 0.0f);
                }
                for (Index c = 0; c < head_dim; ++c) {
                  double expected = 0;
                  for (Index j = 0; j < visible; ++j) expected += p[static_cast<size_t>(j)] / sum * values(j, c);
                  worst_out = testing::worse(worst_out, std::abs(out(i, g * head_dim + c) - expected));
                }
              }
            }
            CHECK(worst_p <= 1e-6);
            CHECK(worst_out <= 1e-5);
            CHECK((scores.rightCols(2).array() == 99.0f).all());  // nothing past each row's reach is written
            CHECK((out.rightCols(1).array() == 99.0f).all());
          }
        }
      }
    }
  }
}

namespace {

// A [rows, cols] matrix of random blocks of ggml type Q held as stored (format ggml): random
// codes, scales of either sign up to a few thousandths (values of order 0.01 to 1).
template <class Q>
Weight<float> random_ggml(Index rows, Index cols, uint32_t seed) {
  using Block = typename Q::Block;
  std::mt19937 rng(seed);
  auto storage = std::make_shared<std::vector<Block>>(static_cast<size_t>(rows * cols / Q::kValues));
  std::uniform_real_distribution<float> scale(-0.004f, 0.004f);
  auto half = [&] { return Eigen::numext::bit_cast<uint16_t>(Eigen::half(scale(rng))); };
  for (Block& b : *storage) {
    auto* bytes = reinterpret_cast<uint8_t*>(&b);
    for (size_t i = 0; i < sizeof(Block); ++i) bytes[i] = static_cast<uint8_t>(rng());
    b.d = half();
    if constexpr (requires { b.dmin; }) b.dmin = half();
    if constexpr (requires { b.m; }) b.m = half();
  }
  const kernels::ggml::View v{reinterpret_cast<const std::byte*>(storage->data()), Q::kType, rows, cols,
                              static_cast<Index>(cols / Q::kValues * sizeof(Block))};
  return Weight<float>::packed<kernels::ggml::Format>(storage, v, true);
}

// A workspace whose products run on target k, split across pool.
kernels::Workspace workspace_on(const kernels::Kernels* k, kernels::ThreadPool& pool) {
  kernels::Workspace work;
  work.pool = &pool;
  work.kernels = k;
  return work;
}

}  // namespace

TEST_CASE("ggml: every type's decode product and GEMM on every target against the widened weight, row lookup exact") {
  size_t types = 0;
  kernels::ggml::each_type([&]<class Q>() {
    ++types;
    const std::string type = Q::kName;
    CAPTURE(type);
    std::vector<std::pair<Index, Index>> shapes = {{37, 512}, {70, 256}};
    if (Q::kValues == 32) shapes.insert(shapes.end(), {{13, 96}, {9, 352}});  // chunks of 256 columns and less
    for (const auto& shape : shapes) {
      const Index rows = shape.first, cols = shape.second;
      CAPTURE(rows);
      CAPTURE(cols);
      const Weight<float> w = random_ggml<Q>(rows, cols, static_cast<uint32_t>(rows * 7 + Q::kType));
      CHECK(w.format() == WeightFormat::Ggml);
      CHECK(w.bytes() == static_cast<size_t>(rows * cols / Q::kValues) * sizeof(typename Q::Block));
      const MatrixRM<float> plain = widened(w);
      // The row lookup is the scalar dequantizer's (bit for bit gguf-py's, test_ggml_quants.cpp).
      std::vector<float> row(static_cast<size_t>(cols));
      const auto* blocks = reinterpret_cast<const typename Q::Block*>(w.format_view<kernels::ggml::Format>().data);
      for (Index b = 0; b < cols / Q::kValues; ++b) Q::dequantize(blocks[(rows - 1) * cols / Q::kValues + b], row.data() + b * Q::kValues);
      CHECK(std::equal(row.begin(), row.end(), plain.row(rows - 1).data()));
      for (const kernels::Kernels* k : runnable_targets()) {
        CAPTURE(k->name);
        kernels::ThreadPool pool(2);
        kernels::Workspace work = workspace_on(k, pool);
        for (Index n : {1, 3, 20, 45, 64}) {  // decode products below 13 positions, the GEMM (panels of 16, 32) from there
          CAPTURE(n);
          const MatrixRM<float> x = random_matrix(n, cols, 51 + static_cast<uint32_t>(n));
          // x rounded as the type's products take it: int16 for Q8_0 (as q8), int8 for the others (as q4).
          const MatrixRM<float> xr = kernels::ggml::kInt16Input<Q> ? q8_rounded(x) : q4_rounded(x);
          const MatrixRM<float> expected = xr * plain.transpose();
          const double l1 = (xr.cwiseAbs() * plain.cwiseAbs().transpose()).maxCoeff();
          MatrixRM<float> out(n, rows);
          kernels::linear(x, w, out, work);
          CHECK(max_abs(out, expected) <= 3e-6 * l1);
        }
      }
    }
  });
  CHECK(types == 12);
}

// One target's GEMM block (`block`, its widening of whole blocks) of every ggml type, at both
// 256-column steps of a row: the scalar dequantizer's values, bit for bit.
template <class BlockFn>
void check_ggml_blocks(BlockFn block) {
  kernels::ggml::each_type([&]<class Q>() {
    const std::string type = Q::kName;
    CAPTURE(type);
    const Index rows = 5, cols = 512, kc = 256;
    const Weight<float> w = random_ggml<Q>(rows, cols, 90 + Q::kType);
    const MatrixRM<float> plain = widened(w);
    std::vector<float> buffer(static_cast<size_t>(rows * kc));
    for (Index k0 = 0; k0 < cols; k0 += kc) {
      Index stride = 0;
      const float* out = block(w.format_view<kernels::ggml::Format>(), 0, rows, k0, kc, buffer.data(), stride);
      size_t differ = 0;
      for (Index r = 0; r < rows; ++r) differ += std::memcmp(out + r * stride, plain.row(r).data() + k0, static_cast<size_t>(kc) * sizeof(float)) != 0;
      CHECK(differ == 0);
    }
  });
}

TEST_CASE("ggml: the NEON and WASM SIMD128 GEMM blocks widen every type bit for bit as the scalar dequantizers") {
  std::string ran;
#if MINIMIND_HAS_NEON
  check_ggml_blocks([](const kernels::ggml::View& w, Index r, Index mr, Index k0, Index kc, float* buf, Index& stride) {
    return kernels::neon::block(w, r, mr, k0, kc, buf, stride);
  });
  ran += " neon";
#endif
#if MINIMIND_HAS_WASM_SIMD
  check_ggml_blocks([](const kernels::ggml::View& w, Index r, Index mr, Index k0, Index kc, float* buf, Index& stride) {
    return kernels::wasm_simd128::block(w, r, mr, k0, kc, buf, stride);
  });
  ran += " wasm_simd128";
#endif
  MESSAGE("ggml blocks widened on:" << (ran.empty() ? std::string(" none (this build has neither target)") : ran));
}

TEST_CASE("ggml Q4_0 relaid in groups of four rows: the same values, decode products and GEMM on every target") {
  for (const auto& shape : std::vector<std::pair<Index, Index>>{{37, 512}, {70, 256}, {13, 96}, {3, 64}}) {
    const Index rows = shape.first, cols = shape.second;  // not bound: clang 14 cannot capture a binding in CAPTURE
    CAPTURE(rows);
    CAPTURE(cols);
    using Block = kernels::ggml::Q4_0::Block;
    const Weight<float> stored = random_ggml<kernels::ggml::Q4_0>(rows, cols, static_cast<uint32_t>(rows + cols));
    const kernels::ggml::View sv = stored.format_view<kernels::ggml::Format>();
    const auto* first = reinterpret_cast<const Block*>(sv.data);
    auto storage = std::make_shared<std::vector<Block>>(first, first + rows * cols / 32);
    kernels::ggml::group_rows(reinterpret_cast<std::byte*>(storage->data()), rows, cols);
    kernels::ggml::View gv = sv;
    gv.data = reinterpret_cast<const std::byte*>(storage->data());
    gv.grouped = true;
    const Weight<float> grouped = Weight<float>::packed<kernels::ggml::Format>(storage, gv, true);
    if (rows >= 4) CHECK(std::memcmp(storage->data(), first, storage->size() * sizeof(Block)) != 0);
    const MatrixRM<float> plain = widened(stored);
    CHECK(widened(grouped) == plain);  // every row's lookup, bit for bit
    for (const kernels::Kernels* k : runnable_targets()) {
      CAPTURE(k->name);
      kernels::ThreadPool pool(2);
      kernels::Workspace work = workspace_on(k, pool);
      for (Index n : {1, 3, 20, 45}) {  // decode products, then the GEMM
        CAPTURE(n);
        const MatrixRM<float> x = random_matrix(n, cols, 61 + static_cast<uint32_t>(n));
        const MatrixRM<float> xr = q4_rounded(x);
        const MatrixRM<float> expected = xr * plain.transpose();
        const double l1 = (xr.cwiseAbs() * plain.cwiseAbs().transpose()).maxCoeff();
        MatrixRM<float> out(n, rows);
        kernels::linear(x, grouped, out, work);
        CHECK(max_abs(out, expected) <= 3e-6 * l1);
      }
      // A share of the rows that starts and ends inside groups (a thread's may).
      const MatrixRM<float> x = random_matrix(1, cols, 60);
      work.prepare(x.data(), cols, 1, cols, kernels::Workspace::Needs::of<kernels::ggml::Format>());
      const auto in = work.inputs<kernels::ggml::Format>(x.data(), cols, cols, 1);
      std::vector<float> y(static_cast<size_t>(rows), 99.0f), expected(y);
      const Index begin = std::min<Index>(2, rows - 1), end = rows - 1;
      k->matvec<kernels::ggml::Format>()(gv, {in.data(), 1}, y.data(), rows, begin, end);
      kernels::ggml::matvec_reference(sv, in[0].x8, in[0].x8_scale, expected.data(), begin, end);
      const double l1 = (q4_rounded(x).cwiseAbs() * plain.cwiseAbs().transpose()).maxCoeff();
      for (Index r = 0; r < rows; ++r) {
        CAPTURE(r);
        if (r < begin || r >= end) CHECK(y[static_cast<size_t>(r)] == 99.0f);
        else CHECK(std::abs(y[static_cast<size_t>(r)] - expected[static_cast<size_t>(r)]) <= 3e-6 * l1);
      }
    }
  }
}

#if MINIMIND_HAS_AVX512
// test_kernels' ggml case runs the GEMM as this CPU runs it (with vpdpbusd where it has VNNI);
// this one runs the AVX-512 tiles both ways and asks for the same bits.
TEST_CASE("ggml int8 GEMM on AVX-512: with VNNI (vpdpbusd) and without (vpmaddubsw), the same bits") {
  if (!kernels::x86_features().avx512) {
    MESSAGE("skipped: this CPU has no AVX-512");
    return;
  }
  const bool vnni = kernels::cpu_features().avx512vnni;
  MESSAGE("int8 GEMM on this CPU: " << std::string(vnni ? "VNNI (both kernels run)" : "no VNNI (vpmaddubsw only)"));
  size_t types = 0;
  kernels::ggml::each_type([&]<class Q>() {
    if constexpr (kernels::ggml::kInt8Gemm<Q>) {
      ++types;
      const std::string type = Q::kName;
      CAPTURE(type);
      const Index rows = 10, cols = 512, n = 40;
      const Weight<float> w = random_ggml<Q>(rows, cols, 77);
      const kernels::ggml::View v = w.format_view<kernels::ggml::Format>();
      const MatrixRM<float> x = random_matrix(n, cols, 78);
      const MatrixRM<float> xr = q4_rounded(x), plain = widened(w);
      const MatrixRM<float> expected = xr * plain.transpose();
      const double l1 = (xr.cwiseAbs() * plain.cwiseAbs().transpose()).maxCoeff();
      kernels::int8_gemm::Int8Panels x8;
      kernels::int8_gemm::avx512::reserve(x8, n, cols);
      kernels::int8_gemm::avx512::pack(x.data(), cols, n, cols, 0, x8.panels, x8);
      const Index stride = x8.panels * x8.panel;
      LineVector<float> buffer(static_cast<size_t>(kernels::int8_gemm::RowPanel::floats(kernels::int8_gemm::avx512::kRows, cols / 32)));
      std::vector<float> without(static_cast<size_t>(rows * stride)), with(without.size());
      CHECK(kernels::ggml::avx512::int8_products(v, x8, 0, rows, buffer.data(), without.data(), stride, false));
      if (vnni) CHECK(kernels::ggml::avx512::int8_products(v, x8, 0, rows, buffer.data(), with.data(), stride, true));
      double worst = 0;
      for (Index r = 0; r < rows; ++r) {
        for (Index i = 0; i < n; ++i) {
          const size_t at = static_cast<size_t>(r * stride + i);
          worst = std::max(worst, std::abs(double(without[at]) - expected(i, r)));
          if (vnni) CHECK(with[at] == without[at]);
        }
      }
      CHECK(worst <= 3e-6 * l1);
    }
  });
  CHECK(types == 4);
}
#endif
