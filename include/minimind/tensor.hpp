#pragma once
// Eigen aliases shared by every component. Weights are row-major [out, in] exactly as the
// checkpoint stores them, and activations are row-major [positions, features], so a weight file's
// bytes can be viewed in place and one row of activations is one token.
#include <Eigen/Core>

#include <cstdint>

namespace minimind {

using Index = Eigen::Index;

template <class T>
using MatrixRM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using RowVector = Eigen::Matrix<T, 1, Eigen::Dynamic>;

template <class T>
using MatrixMap = Eigen::Map<MatrixRM<T>>;
template <class T>
using ConstMatrixMap = Eigen::Map<const MatrixRM<T>>;
template <class T>
using ConstVectorMap = Eigen::Map<const RowVector<T>>;
// The first rows of a matrix, as topRows(n) views them (what forward and Batch::step return).
template <class T>
using TopRows = typename MatrixRM<T>::RowsBlockXpr;

}  // namespace minimind
