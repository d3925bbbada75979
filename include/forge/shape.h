#pragma once
// Shape and strides: up to kMaxRank signed 64-bit extents stored inline, so a
// tensor's geometry never touches the heap. Strides are in elements.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

namespace forge {

inline constexpr int kMaxRank = 8;

class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.size()); }
  Dims(std::span<const std::int64_t> dims) { assign(dims.data(), dims.size()); }
  Dims(const std::vector<std::int64_t>& dims) { assign(dims.data(), dims.size()); }
  static Dims filled(int rank, std::int64_t value);

  int size() const noexcept { return rank_; }
  int rank() const noexcept { return rank_; }
  bool empty() const noexcept { return rank_ == 0; }
  std::int64_t operator[](int i) const noexcept { return d_[static_cast<std::size_t>(i)]; }
  std::int64_t& operator[](int i) noexcept { return d_[static_cast<std::size_t>(i)]; }
  const std::int64_t* data() const noexcept { return d_.data(); }
  std::int64_t* data() noexcept { return d_.data(); }
  const std::int64_t* begin() const noexcept { return d_.data(); }
  const std::int64_t* end() const noexcept { return d_.data() + rank_; }
  std::int64_t back() const noexcept { return d_[static_cast<std::size_t>(rank_ - 1)]; }
  operator std::span<const std::int64_t>() const noexcept { return {d_.data(), static_cast<std::size_t>(rank_)}; }
  std::vector<std::int64_t> vec() const { return {begin(), end()}; }

  void push_back(std::int64_t v);        // throws past kMaxRank
  void insert(int pos, std::int64_t v);  // throws past kMaxRank
  void erase(int pos) noexcept;
  void resize(int rank, std::int64_t fill = 0);  // throws past kMaxRank

  // Product of the extents (1 for rank 0). Callers validate non-negativity.
  std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= d_[static_cast<std::size_t>(i)];
    return n;
  }

  friend bool operator==(const Dims& a, const Dims& b) noexcept {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a.d_[static_cast<std::size_t>(i)] != b.d_[static_cast<std::size_t>(i)]) return false;
    return true;
  }
  std::string str() const;  // "[2, 3]"

 private:
  void assign(const std::int64_t* p, std::size_t n);
  std::array<std::int64_t, kMaxRank> d_{};
  int rank_ = 0;
};

using Shape = Dims;
using Strides = Dims;

// The dims a reduction runs over: a braced list, a single dim, or none.
struct DimList : Dims {
  DimList() = default;
  DimList(std::int64_t dim) : Dims{dim} {}  // NOLINT(google-explicit-constructor): x.sum(1)
  DimList(std::initializer_list<std::int64_t> dims) : Dims(dims) {}
  DimList(const Dims& dims) : Dims(dims) {}  // NOLINT(google-explicit-constructor)
};

std::ostream& operator<<(std::ostream& out, const Dims& d);

// Row-major strides for a shape.
Strides contiguous_strides(const Shape& shape) noexcept;

// Wraps a possibly negative dim into [0, rank); throws out_of_range naming op.
int wrap_dim(std::int64_t dim, int rank, const char* op);

// Validates a shape for op: every extent >= 0, and the product of the
// extents (counting zeros as ones) fits in int64, so that numel and every
// contiguous stride of it can be computed without overflow. Returns numel.
// Throws invalid_argument naming op.
std::int64_t checked_extents(const Shape& shape, const char* op);

// NumPy broadcast of two shapes (checked as above); throws ErrorCode::shape naming op.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace forge
