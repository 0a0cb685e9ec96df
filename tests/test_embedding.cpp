// The tied embedding: one matrix, read as rows (embedding) and multiplied (lm_head).
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

using namespace minimind;

namespace {

// The seed's four tokens in two dimensions: cat, dog, stone, eat.
Embedding<float> seed_vocabulary() {
  MatrixRM<float> e(4, 2);
  e << 0.9f, 0.8f,   // cat
      0.8f, 0.7f,    // dog
      -0.5f, -0.6f,  // stone
      0.3f, -0.2f;   // eat
  return Embedding<float>(std::move(e));
}

RowVector<float> vec(float a, float b) {
  RowVector<float> v(2);
  v << a, b;
  return v;
}

}  // namespace

TEST_CASE("lm_head scores are dot products with every row of the one matrix") {
  const auto embedding = seed_vocabulary();
  const RowVector<float> animal = embedding.logits(vec(0.85f, 0.75f));
  CHECK(animal[0] == doctest::Approx(1.365).epsilon(1e-6));
  CHECK(animal[1] == doctest::Approx(1.205).epsilon(1e-6));
  CHECK(animal[2] == doctest::Approx(-0.875).epsilon(1e-6));
  CHECK(animal[3] == doctest::Approx(0.105).epsilon(1e-6));

  const RowVector<float> hard = embedding.logits(vec(-0.45f, -0.55f));
  CHECK(hard[0] == doctest::Approx(-0.845).epsilon(1e-6));
  CHECK(hard[1] == doctest::Approx(-0.745).epsilon(1e-6));
  CHECK(hard[2] == doctest::Approx(0.555).epsilon(1e-6));
  CHECK(hard[3] == doctest::Approx(-0.025).epsilon(1e-6));
  Index best = -1;
  hard.maxCoeff(&best);
  CHECK(best == 2);  // stone
}

TEST_CASE("embedding lookup returns the token's row") {
  const auto embedding = seed_vocabulary();
  const RowVector<float> cat = embedding.lookup(0);
  CHECK(cat[0] == doctest::Approx(0.9f));
  CHECK(cat[1] == doctest::Approx(0.8f));
  MatrixRM<float> rows(2, 2);
  const std::vector<int32_t> ids = {2, 3};
  embedding.lookup(ids, rows);
  CHECK(rows(0, 0) == doctest::Approx(-0.5f));
  CHECK(rows(1, 1) == doctest::Approx(-0.2f));
}

TEST_CASE("writing to the embedding changes lm_head's scores: one storage") {
  auto embedding = seed_vocabulary();
  const float before = embedding.logits(vec(0.85f, 0.75f))[3];
  embedding.mutable_weight().row(3) << 1.0f, 1.0f;  // teach "eat" to look like an animal
  const float after = embedding.logits(vec(0.85f, 0.75f))[3];
  CHECK(before == doctest::Approx(0.105));
  CHECK(after == doctest::Approx(1.6));
  CHECK(embedding.lookup(3)[0] == doctest::Approx(1.0f));
  CHECK(embedding.weight().data() == embedding.mutable_weight().data());
}

TEST_CASE("ids outside the vocabulary are refused with the id and the vocab size") {
  const auto embedding = seed_vocabulary();
  CHECK_THROWS_WITH_AS(embedding.lookup(4), doctest::Contains("token id 4 is outside the vocabulary [0, 4)"), Error);
  CHECK_THROWS_WITH_AS(embedding.lookup(-1), doctest::Contains("token id -1"), Error);
}

TEST_CASE("parameter arithmetic of tying") {
  MatrixRM<float> e = MatrixRM<float>::Zero(6400, 512);
  Embedding<float> embedding(std::move(e));
  CHECK(embedding.num_parameters() == 3'276'800);
  // MiniMind2-Small counts 25,829,888 with the matrix once; untied it would need 29,106,688.
  const double saved = 3'276'800.0 / 25'829'888.0;
  CHECK(saved == doctest::Approx(0.127).epsilon(0.005));
}
