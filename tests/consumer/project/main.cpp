// A user's program: includes the umbrella header and uses the tied embedding both ways.
#include <minimind/minimind.hpp>

#include <cstdio>

int main() {
  minimind::MatrixRM<float> table(2, 2);
  table << 1.0f, 0.0f, 0.0f, 1.0f;
  minimind::Embedding<float> embedding(std::move(table));
  Eigen::RowVectorXf h(2);
  h << 0.25f, 0.75f;
  Eigen::RowVectorXf scores = embedding.logits(h);
  std::printf("%.2f %.2f\n", scores[0], scores[1]);
  return scores[1] > scores[0] ? 0 : 1;
}
