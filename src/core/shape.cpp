#include "forge/shape.h"

#include <ostream>
#include <sstream>

#include "forge/error.h"

namespace forge {

void Dims::assign(const std::int64_t* p, std::size_t n) {
  FORGE_CHECK(n <= static_cast<std::size_t>(kMaxRank), invalid_argument, "shape", "rank ", n,
              " exceeds the maximum rank ", kMaxRank);
  for (std::size_t i = 0; i < n; ++i) d_[i] = p[i];
  rank_ = static_cast<int>(n);
}

Dims Dims::filled(int rank, std::int64_t value) {
  Dims d;
  d.resize(rank, value);
  return d;
}

void Dims::push_back(std::int64_t v) {
  FORGE_CHECK(rank_ < kMaxRank, invalid_argument, "shape", "rank ", rank_ + 1, " exceeds the maximum rank ", kMaxRank);
  d_[static_cast<std::size_t>(rank_++)] = v;
}

void Dims::insert(int pos, std::int64_t v) {
  FORGE_CHECK(rank_ < kMaxRank, invalid_argument, "shape", "rank ", rank_ + 1, " exceeds the maximum rank ", kMaxRank);
  for (int i = rank_; i > pos; --i) d_[static_cast<std::size_t>(i)] = d_[static_cast<std::size_t>(i - 1)];
  d_[static_cast<std::size_t>(pos)] = v;
  ++rank_;
}

void Dims::erase(int pos) noexcept {
  for (int i = pos; i + 1 < rank_; ++i) d_[static_cast<std::size_t>(i)] = d_[static_cast<std::size_t>(i + 1)];
  --rank_;
}

void Dims::resize(int rank, std::int64_t fill) {
  FORGE_CHECK(rank >= 0 && rank <= kMaxRank, invalid_argument, "shape", "rank ", rank, " is outside [0, ", kMaxRank,
              "]");
  for (int i = rank_; i < rank; ++i) d_[static_cast<std::size_t>(i)] = fill;
  rank_ = rank;
}

std::string Dims::str() const try {
  std::ostringstream out;
  out << *this;
  return out.str();
}
FORGE_CATCH_OOM("Dims::str")

std::ostream& operator<<(std::ostream& out, const Dims& d) {
  out << '[';
  for (int i = 0; i < d.rank(); ++i) out << (i ? ", " : "") << d[i];
  return out << ']';
}

Strides contiguous_strides(const Shape& shape) noexcept {
  Strides s = shape;
  std::int64_t step = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    s[i] = step;
    step *= shape[i] > 1 ? shape[i] : 1;
  }
  return s;
}

int wrap_dim(std::int64_t dim, int rank, const char* op) {
  const std::int64_t lo = rank == 0 ? -1 : -rank, hi = rank == 0 ? 0 : rank - 1;
  FORGE_CHECK(dim >= lo && dim <= hi, out_of_range, op, "dim ", dim, " is out of range for a tensor of rank ", rank,
              " (expected [", lo, ", ", hi, "])");
  return static_cast<int>(dim < 0 ? dim + (rank == 0 ? 1 : rank) : dim);
}

std::int64_t checked_extents(const Shape& shape, const char* op) {
  std::int64_t span = 1, numel = 1;
  for (int d = 0; d < shape.rank(); ++d) {
    FORGE_CHECK(shape[d] >= 0, invalid_argument, op, "negative size ", shape[d], " in dimension ", d, " of shape ",
                shape);
    FORGE_CHECK(!__builtin_mul_overflow(span, shape[d] > 1 ? shape[d] : 1, &span), invalid_argument, op, "shape ",
                shape, " has more elements than fit in int64");
    numel *= shape[d];
  }
  return numel;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int rank = a.rank() > b.rank() ? a.rank() : b.rank();
  Shape out = Shape::filled(rank, 1);
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank()), ib = i - (rank - b.rank());
    const std::int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    FORGE_CHECK(da == db || da == 1 || db == 1, shape, op, "shapes ", a, " and ", b, " do not broadcast (dimension ", i,
                ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  checked_extents(out, op);
  return out;
}

}  // namespace forge
