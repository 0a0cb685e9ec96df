#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

#include "reference_ops.hpp"

using namespace minimind;
namespace ref = minimind::reference;

TEST_CASE("RMSNorm divides by the root mean square and scales by gamma") {
  RMSNorm<float> norm(Weight<float>::owned(MatrixRM<float>::Ones(1, 3)), 1e-5);
  MatrixRM<float> x(1, 3), y(1, 3);
  x << 150, 200, 180;
  norm.forward(x, y);
  CHECK(y(0, 0) == doctest::Approx(0.843).epsilon(1e-3));
  CHECK(y(0, 1) == doctest::Approx(1.124).epsilon(1e-3));
  CHECK(y(0, 2) == doctest::Approx(1.012).epsilon(1e-3));
  CHECK(y.squaredNorm() / 3 == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE("RMSNorm: gamma per feature, rows independent, eps inside the root") {
  MatrixRM<float> gamma(1, 2);
  gamma << 2, -1;
  RMSNorm<float> norm(Weight<float>::owned(gamma), 0.5);
  MatrixRM<float> x(2, 2), y(2, 2);
  x << 1, 1, 0, 0;
  norm.forward(x, y);
  const float inv = 1.0f / std::sqrt(1.0f + 0.5f);
  CHECK(y(0, 0) == doctest::Approx(2 * inv));
  CHECK(y(0, 1) == doctest::Approx(-inv));
  CHECK(y(1, 0) == 0.0f);  // eps keeps zeros finite
  CHECK(y(1, 1) == 0.0f);
}

TEST_CASE("RMSNorm in place over consecutive heads (q_norm / k_norm)") {
  RMSNorm<float> norm(Weight<float>::owned(MatrixRM<float>::Ones(1, 2)), 1e-6);
  std::vector<float> heads = {3, 4, 0, 2};
  norm.forward(heads.data(), heads.data(), 2);
  const float rms0 = std::sqrt(12.5f);
  CHECK(heads[0] == doctest::Approx(3 / rms0));
  CHECK(heads[1] == doctest::Approx(4 / rms0));
  CHECK(heads[2] == doctest::Approx(0.0f));
  CHECK(heads[3] == doctest::Approx(2 / std::sqrt(2.0f)));
}

TEST_CASE_TEMPLATE("RMSNorm equals the naive reference on random shapes, whole rows and per head", T, float, double) {
  for (const Index dim : {1, 3, 8, 37, 64}) {
    CAPTURE(dim);
    const auto gamma = ref::random_matrix<T>(1, dim, static_cast<unsigned>(dim), 2.0);
    for (const double eps : {1e-6, 1e-5, 0.25}) {
      CAPTURE(eps);
      const RMSNorm<T> norm(Weight<T>::owned(gamma), eps);
      // Rows of very different scales: at 1e-3 the eps inside the root matters, at 30 it does not.
      auto x = ref::random_matrix<T>(5, dim, 7);
      x.row(1) *= T(1e-3);
      x.row(2) *= T(30);
      MatrixRM<T> y(5, dim);
      norm.forward(x, y);
      const ref::Mat want = ref::rms_norm(x.template cast<double>(), gamma.template cast<double>(), eps);
      CHECK(ref::max_diff(y, want) <= 4 * ref::tolerance<T>());
      // The same values as 5 * dim / dim "heads" of one row, in place (q_norm / k_norm).
      MatrixRM<T> heads = x;
      norm.forward(heads.data(), heads.data(), 5);
      CHECK(heads == y);
    }
  }
}
