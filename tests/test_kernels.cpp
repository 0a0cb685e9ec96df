// The fast kernels (include/minimind/detail/kernels/) against their plain references on random inputs:
// each format's matrix-vector product, the prefill GEMM, the dispatching linear(), and the pool.
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <string_view>
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
    kernels::q8::quantize_activations(x.row(r).data(), x.cols(), q.data(), d.data());
    for (Index c = 0; c < x.cols(); ++c) out(r, c) = d[static_cast<size_t>(c / 32)] * q[static_cast<size_t>(c)];
  }
  return out;
}

double max_abs(const MatrixRM<float>& a, const MatrixRM<float>& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  return (a - b).cwiseAbs().maxCoeff();
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

  // Activations: int16 with float scales, same blocks; the vectorized path matches the scalar rule.
  std::vector<int16_t> q(128);
  std::vector<float> d(4);
  kernels::q8::quantize_activations(m.row(0).data(), cols, q.data(), d.data());
  for (Index c = 0; c < cols; ++c) {
    const float expected = m(0, c) / d[static_cast<size_t>(c / 32)];
    CHECK(std::abs(q[static_cast<size_t>(c)] - expected) <= 0.5f + 1e-3f);
  }
}

TEST_CASE("matrix-vector kernels match their references on random inputs") {
  for (Index cols : {8, 32, 64, 100, 512, 1408}) {
    for (Index rows : {1, 3, 4, 17, 64}) {
      CAPTURE(rows);
      CAPTURE(cols);
      const MatrixRM<float> m = random_matrix(rows, cols, static_cast<uint32_t>(rows * 1000 + cols), 0.05f);
      const MatrixRM<float> x = random_matrix(1, cols, 7);
      std::vector<float> ref(static_cast<size_t>(rows)), got(static_cast<size_t>(rows));

      kernels::f32::matvec_reference(m.data(), cols, x.data(), ref.data(), 0, rows);
      kernels::f32::matvec(m.data(), cols, x.data(), got.data(), 0, rows);
      for (Index r = 0; r < rows; ++r) CHECK(got[r] == doctest::Approx(ref[r]).epsilon(1e-5).scale(1));

      const Weight<float> b = Weight<float>::owned(m).to_format(WeightFormat::BF16);
      kernels::bf16::matvec_reference(b.bf16_data(), cols, x.data(), ref.data(), 0, rows);
      kernels::bf16::matvec(b.bf16_data(), cols, x.data(), got.data(), 0, rows);
      for (Index r = 0; r < rows; ++r) CHECK(got[r] == doctest::Approx(ref[r]).epsilon(1e-5).scale(1));

      const Weight<float> q = Weight<float>::owned(m).to_format(WeightFormat::Q8);
      const Index blocks = kernels::q8::blocks_for(cols);
      std::vector<int16_t> xq(static_cast<size_t>(blocks * 32));
      std::vector<float> xd(static_cast<size_t>(blocks));
      kernels::q8::quantize_activations(x.data(), cols, xq.data(), xd.data());
      kernels::q8::matvec_reference(q.q8_view(), xq.data(), xd.data(), ref.data(), 0, rows);
      kernels::q8::matvec(q.q8_view(), xq.data(), xd.data(), got.data(), 0, rows);
      for (Index r = 0; r < rows; ++r) CHECK(got[r] == doctest::Approx(ref[r]).epsilon(1e-5).scale(1));
      // A sub-range writes only its rows.
      if (rows > 4) {
        std::vector<float> part(static_cast<size_t>(rows), -7.0f);
        kernels::q8::matvec(q.q8_view(), xq.data(), xd.data(), part.data(), 1, rows - 1);
        CHECK(part[0] == -7.0f);
        CHECK(part[static_cast<size_t>(rows - 1)] == -7.0f);
        for (Index r = 1; r < rows - 1; ++r) CHECK(part[static_cast<size_t>(r)] == doctest::Approx(ref[r]).epsilon(1e-5).scale(1));
      }
    }
  }
}

TEST_CASE("linear(): every format, decode and prefill, 1 and 2 threads, against the plain Eigen product") {
  // The plain product on the widened weight (and, for q8, on the rounded activations).
  for (WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8}) {
    for (int threads : {1, 2}) {
      kernels::ThreadPool pool(threads);
      kernels::Workspace work;
      work.pool = &pool;
      for (Index n : {1, 2, 3, 7, 33}) {
        for (const auto& shape : {std::pair<Index, Index>{64, 48}, {200, 64}, {1408, 512}, {96, 1408}, {50, 45}, {13, 301}}) {
          const Index rows = shape.first, cols = shape.second;  // clang 14 cannot capture structured bindings
          CAPTURE(std::string(format_name(format)));
          CAPTURE(threads);
          CAPTURE(n);
          CAPTURE(rows);
          CAPTURE(cols);
          const Weight<float> w = Weight<float>::owned(random_matrix(rows, cols, 11, 1.0f / std::sqrt(float(cols)))).to_format(format);
          const MatrixRM<float> x = random_matrix(n + 2, cols + 5, 12);  // a block with an outer stride
          const auto xb = x.topLeftCorner(n, cols);
          const MatrixRM<float> expected =
              (format == WeightFormat::Q8 ? q8_rounded(xb) : MatrixRM<float>(xb)) * widened(w).transpose();
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

TEST_CASE("tied matrix in bf16 and q8: one tensor for lookup and lm_head") {
  for (WeightFormat format : {WeightFormat::BF16, WeightFormat::Q8}) {
    const MatrixRM<float> e = random_matrix(50, 64, 3);
    Embedding<float> tied(Weight<float>::owned(e).to_format(format));
    CHECK(tied.weight().format() == format);
    const RowVector<float> row = tied.lookup(7);
    RowVector<float> expected(64);
    tied.weight().row_to(7, expected.data());
    CHECK(row == expected);
    CHECK((row - e.row(7)).cwiseAbs().maxCoeff() < 0.05);
    // lm_head of the looked-up row scores that row highest.
    const RowVector<float> logits = tied.logits(row);
    Index best = -1;
    logits.maxCoeff(&best);
    CHECK(best == 7);
    CHECK_THROWS_AS(tied.mutable_weight(), Error);
  }
}

TEST_CASE("random models: bf16 and q8 logits stay near f32; the tied matrix is one tensor in every format") {
  Config c = Config::minimind2_small();
  c.num_hidden_layers = 2;
  const auto f32 = MiniMindForCausalLM<float>::random(c, 5);
  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back((i * 977 + 3) % 6400);
  const MatrixRM<float> reference = f32.forward(ids);
  for (WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8}) {
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
      CHECK(diff <= (format == WeightFormat::F32 ? 1e-4 : format == WeightFormat::BF16 ? 0.05 : 0.2));
      // Cached decode agrees with the full recompute in every format.
      auto session = model.new_session(static_cast<Index>(ids.size()));
      double step = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        auto row = model.forward(session, std::span<const int32_t>(&ids[i], 1));
        step = std::max(step, static_cast<double>((row.row(0) - got.row(static_cast<Index>(i))).cwiseAbs().maxCoeff()));
      }
      // q8 rounds activations to integers, so a 1e-7 difference in summation order between the
      // batched and the one-token path can move a value across a rounding boundary.
      CHECK(step <= (format == WeightFormat::Q8 ? 0.1 : 1e-4));
    }
  }
  const auto q8 = MiniMindForCausalLM<float>::random(c, 5, {WeightFormat::Q8, 1});
  CHECK(q8.weight_bytes() < f32.weight_bytes() / 3);
}

TEST_CASE("linear(): up to 8 positions give each exactly what it gives alone (a small batch's decode step)") {
  for (WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8}) {
    kernels::ThreadPool pool(2);
    kernels::Workspace work;
    work.pool = &pool;
    const Weight<float> w = Weight<float>::owned(random_matrix(70, 100, 41, 0.1f)).to_format(format);
    for (Index n = 2; n <= 8; ++n) {
      CAPTURE(std::string(format_name(format)));
      CAPTURE(n);
      const MatrixRM<float> x = random_matrix(n, 100, 42);
      MatrixRM<float> y(n, 70), alone(1, 70);
      kernels::linear(x, w, y, work);
      for (Index i = 0; i < n; ++i) {
        kernels::linear(x.middleRows(i, 1), w, alone, work);
        CHECK((y.row(i).array() == alone.row(0).array()).all());
      }
    }
  }
}

TEST_CASE("linear_each(): several weights of one input give what one linear() each gives") {
  // Decode (n < 9) and prefill (gemm_each: one pack, the rows of all three in one dispatch, here
  // 130 rows = 3 chunks of 48, 40, 17); the last pair mixes q8 with another format (two inputs).
  const std::pair<WeightFormat, WeightFormat> pairs[] = {{WeightFormat::F32, WeightFormat::F32},
                                                         {WeightFormat::BF16, WeightFormat::BF16},
                                                         {WeightFormat::Q8, WeightFormat::Q8},
                                                         {WeightFormat::Q8, WeightFormat::F32}};
  for (const auto& formats : pairs) {
    for (int threads : {1, 2, 3}) {
      kernels::ThreadPool pool(threads);
      kernels::Workspace work;
      work.pool = &pool;
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

TEST_CASE("q8::matvec: blocks at the largest magnitudes sum exactly (no int32 overflow, exact float lanes)") {
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
  std::vector<int16_t> xq(static_cast<size_t>(blocks * 32));
  std::vector<float> xd(static_cast<size_t>(blocks));
  kernels::q8::quantize_activations(x.data(), cols, xq.data(), xd.data());
  for (Index c = 0; c < cols; ++c) CHECK(std::abs(xq[static_cast<size_t>(c)]) == 32767);
  std::vector<float> ref(static_cast<size_t>(rows)), got(static_cast<size_t>(rows));
  kernels::q8::matvec_reference(q.q8_view(), xq.data(), xd.data(), ref.data(), 0, rows);
  kernels::q8::matvec(q.q8_view(), xq.data(), xd.data(), got.data(), 0, rows);
  for (Index r = 0; r < rows; ++r) {
    double exact = 0;
    for (Index c = 0; c < cols; ++c) exact += static_cast<double>(m(r, c)) * x[static_cast<size_t>(c)];
    CHECK(got[static_cast<size_t>(r)] == doctest::Approx(ref[static_cast<size_t>(r)]).epsilon(1e-6));
    CHECK(got[static_cast<size_t>(r)] == doctest::Approx(exact).epsilon(1e-3));
  }
}

TEST_CASE("q8::quantize_activations: tiny, zero and non-finite blocks never convert NaN to an integer (fuzz_safetensors finding)") {
  using minimind::kernels::q8::quantize_activations;
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (const Index cols : {Index{8}, Index{32}}) {  // the scalar tail path and the AVX2 full block
    CAPTURE(cols);
    // 32767 / denorm_min overflows: a zero next to it made 0 * inf = NaN before the fix.
    std::vector<float> x(static_cast<size_t>(cols), 0.0f);
    x[1] = tiny;
    x[2] = -tiny;
    std::vector<int16_t> q(32, 99);
    float d = -1;
    quantize_activations(x.data(), cols, q.data(), &d);
    CHECK(d == 0.0f);
    for (const int16_t v : q) CHECK(v == 0);
    // Non-finite activations keep the block's product non-finite (the sampler refuses it).
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      x.assign(static_cast<size_t>(cols), 1.0f);
      x[3] = bad;
      quantize_activations(x.data(), cols, q.data(), &d);
      CHECK_FALSE(std::isfinite(d));
    }
  }
}

TEST_CASE("gemm(): every format against the plain product, rows not a multiple of the tile, columns not of a vector, 3..70 positions, 1 to 3 threads") {
  // Tiles are 12 rows x 32 positions (AVX-512) or 6 x 16 (AVX2), in chunks of 48 rows and blocks
  // of 256 columns: these shapes leave a remainder in each, and 300 columns span two blocks.
  for (WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8}) {
    for (int threads : {1, 2, 3}) {
      kernels::ThreadPool pool(threads);
      kernels::GemmScratch scratch;
      for (const auto& shape : {std::pair<Index, Index>{1, 40}, {13, 300}, {59, 77}, {100, 33}, {131, 520}}) {
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
          const MatrixRM<float> expected = (format == WeightFormat::Q8 ? q8_rounded(xb) : MatrixRM<float>(xb)) * plain.transpose();
          MatrixRM<float> y = MatrixRM<float>::Constant(n, rows + 2, 99.0f);
          kernels::gemm(x.data(), x.outerStride(), n, w, y.data(), y.outerStride(), scratch, &pool);
          CHECK(max_abs(y.leftCols(rows), expected) <= 3e-5);
          CHECK((y.rightCols(2).array() == 99.0f).all());
        }
      }
    }
  }
}

namespace {

// The decode kernels of one target, as the format files provide them.
struct DecodeTarget {
  std::string_view name;
  void (*f32)(const float*, Index, const float*, float*, Index, Index);
  void (*bf16)(const uint16_t*, Index, const float*, float*, Index, Index);
  void (*q8)(const kernels::q8::View&, const int16_t*, const float*, float*, Index, Index);
};

// Every target this build compiled (this CPU runs them all, as it runs the build's best).
std::vector<DecodeTarget> compiled_decode_targets() {
  namespace k = kernels;
  std::vector<DecodeTarget> targets;
#if MINIMIND_AVX512
  // q8 has no 512-bit kernel (slower than the 256-bit one): AVX-512 builds run AVX2's.
  targets.push_back({"avx512", k::f32::matvec_rows<k::f32::dot<k::Avx512>>, k::bf16::matvec_rows<k::bf16::dot<k::Avx512>>,
                     k::q8::matvec_groups<k::q8::avx2::group>});
#endif
#if MINIMIND_AVX2
  targets.push_back({"avx2", k::f32::matvec_rows<k::f32::dot<k::Avx2>>, k::bf16::matvec_rows<k::bf16::dot<k::Avx2>>,
                     k::q8::matvec_groups<k::q8::avx2::group>});
#endif
#if MINIMIND_NEON
  // q8's row dot is NEON's there (q8::dot), under the same group loop as the plain one.
  targets.push_back({"neon", k::f32::matvec_rows<k::f32::dot<k::neon::Ops>>,
                     k::bf16::matvec_rows<k::bf16::dot<k::neon::Ops>>, k::q8::matvec_groups<k::q8::scalar::group>});
#endif
#if MINIMIND_WASM_SIMD
  targets.push_back({"wasm_simd128", k::f32::matvec_rows<k::f32::dot<k::wasm::Ops>>,
                     k::bf16::matvec_rows<k::bf16::dot<k::wasm::Ops>>, k::q8::matvec_groups<k::q8::scalar::group>});
#endif
  targets.push_back({"scalar", k::f32::matvec_rows<k::f32::scalar::dot>, k::bf16::matvec_rows<k::bf16::scalar::dot>,
                     k::q8::matvec_groups<k::q8::scalar::group>});
  return targets;
}

}  // namespace

TEST_CASE("decode kernels of every compiled target match the references on awkward shapes and row ranges") {
  const auto targets = compiled_decode_targets();
  std::string ran, not_run;
  for (const auto& t : kernels::kTargets) {
    std::string& list = t.compiled ? ran : not_run;
    list += (list.empty() ? "" : ", ") + std::string(t.name);
  }
  MESSAGE("decode kernels ran for: " << ran << "; not in this build (or CPU): " << (not_run.empty() ? "none" : not_run));
  CHECK(targets.size() == static_cast<size_t>(std::count_if(kernels::kTargets.begin(), kernels::kTargets.end(),
                                                           [](const kernels::Target& t) { return t.compiled; })));
  CHECK(targets.front().name == kernels::name());

  for (const auto& target : targets) {
    CAPTURE(target.name);
    for (Index cols : {1, 15, 17, 33, 63, 65, 100, 129, 777}) {
      for (Index rows : {1, 3, 5, 9, 13}) {
        CAPTURE(rows);
        CAPTURE(cols);
        const MatrixRM<float> m = random_matrix(rows, cols, static_cast<uint32_t>(rows * 7919 + cols), 0.05f);
        const MatrixRM<float> x = random_matrix(1, cols, static_cast<uint32_t>(cols + 3));
        const Weight<float> b = Weight<float>::owned(m).to_format(WeightFormat::BF16);
        const Weight<float> q = Weight<float>::owned(m).to_format(WeightFormat::Q8);
        const Index blocks = kernels::q8::blocks_for(cols);
        std::vector<int16_t> xq(static_cast<size_t>(blocks * 32));
        std::vector<float> xd(static_cast<size_t>(blocks));
        kernels::q8::quantize_activations(x.data(), cols, xq.data(), xd.data());

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
          target.f32(m.data(), cols, x.data(), got.data(), begin, end);
          check("f32");
          kernels::bf16::matvec_reference(b.bf16_data(), cols, x.data(), ref.data(), begin, end);
          target.bf16(b.bf16_data(), cols, x.data(), got.data(), begin, end);
          check("bf16");
          kernels::q8::matvec_reference(q.q8_view(), xq.data(), xd.data(), ref.data(), begin, end);
          target.q8(q.q8_view(), xq.data(), xd.data(), got.data(), begin, end);
          check("q8");
        }
      }
    }
  }
}

namespace {

// A 128-bit target's three dot products (kernels/neon.hpp, kernels/wasm_simd128.hpp) against the
// scalar references, on lengths that leave every tail: f32 on multiples of 4, bf16 of 8, q8 rows
// of 1 to 9 blocks, in grouped rows (blocks 128 bytes apart) and the rows after the last group.
template <class F32Dot, class Bf16Dot, class Q8Dot>
void check_128bit_dots(F32Dot f32_dot, Bf16Dot bf16_dot, Q8Dot q8_dot) {
  for (Index cols : {1, 3, 4, 7, 8, 12, 15, 16, 20, 31, 33, 64, 100, 257, 1027}) {
    CAPTURE(cols);
    const MatrixRM<float> m = random_matrix(5, cols, static_cast<uint32_t>(cols), 0.05f);
    const MatrixRM<float> x = random_matrix(1, cols, static_cast<uint32_t>(cols + 1));
    float ref = 0;
    kernels::f32::matvec_reference(m.data(), cols, x.data(), &ref, 0, 1);
    CHECK(f32_dot(m.data(), x.data(), cols / 4 * 4) + kernels::f32::scalar::dot(m.data() + cols / 4 * 4, x.data() + cols / 4 * 4, cols % 4) ==
          doctest::Approx(ref).epsilon(1e-5).scale(1));
    float got = 0;  // the build's own matvec: this target with its tail
    kernels::f32::matvec(m.data(), cols, x.data(), &got, 0, 1);
    CHECK(got == doctest::Approx(ref).epsilon(1e-5).scale(1));

    const Weight<float> b = Weight<float>::owned(m).to_format(WeightFormat::BF16);
    kernels::bf16::matvec_reference(b.bf16_data(), cols, x.data(), &ref, 0, 1);
    const Index whole = cols / 8 * 8;
    CHECK(bf16_dot(b.bf16_data(), x.data(), whole) + kernels::bf16::scalar::dot(b.bf16_data() + whole, x.data() + whole, cols % 8) ==
          doctest::Approx(ref).epsilon(1e-5).scale(1));
    kernels::bf16::matvec(b.bf16_data(), cols, x.data(), &got, 0, 1);
    CHECK(got == doctest::Approx(ref).epsilon(1e-5).scale(1));
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
    kernels::q8::quantize_activations(x.data(), cols, xq.data(), xd.data());
    std::vector<float> ref(5);
    kernels::q8::matvec_reference(w, xq.data(), xd.data(), ref.data(), 0, 5);
    for (Index r = 0; r < 5; ++r) {
      CAPTURE(r);
      const Index stride = r < 4 ? 4 * 32 : 32;  // row 4 follows the one group of four
      CHECK(q8_dot(kernels::q8::block_ptr(w, r, 0), stride, w.d + r * blocks, xq.data(), xd.data(), blocks) ==
            doctest::Approx(ref[static_cast<size_t>(r)]).epsilon(1e-5).scale(1));
      CHECK(kernels::q8::dot(w, r, xq.data(), xd.data()) == doctest::Approx(ref[static_cast<size_t>(r)]).epsilon(1e-5).scale(1));
    }
  }
}

}  // namespace

TEST_CASE("NEON dot products (aarch64) match the scalar references on every tail") {
#if MINIMIND_NEON
  check_128bit_dots(kernels::f32::dot<kernels::neon::Ops>, kernels::bf16::dot<kernels::neon::Ops>, kernels::neon::q8_dot);
  MESSAGE("ran: NEON kernels");
#else
  MESSAGE("not run: NEON kernels (this build is not for aarch64)");
#endif
}

TEST_CASE("WebAssembly SIMD128 dot products match the scalar references on every tail") {
#if MINIMIND_WASM_SIMD
  check_128bit_dots(kernels::f32::dot<kernels::wasm::Ops>, kernels::bf16::dot<kernels::wasm::Ops>, kernels::wasm::q8_dot);
  MESSAGE("ran: WebAssembly SIMD128 kernels");
#else
  MESSAGE("not run: WebAssembly SIMD128 kernels (this build is not for wasm with -msimd128)");
#endif
}
