#pragma once
// libtorch's C++ indexing (docs/OPS.md "Indexing"): t.index({0, Slice(1, None), -1})
// and t.index_put_({mask}, 0.0). An index list holds, one per entry:
//   - an integer (negative counts from the end): selects, and drops the dim;
//   - Slice(start, stop, step) with None for an open end (step > 0): keeps the dim;
//   - None: inserts a dim of size 1;  Ellipsis (or "..."): as many full slices as needed;
//   - true / false: a new dim of size 1 / 0 (an advanced index, so the result is a copy);
//   - an integer tensor (i64 or i32): advanced indexing, several of them broadcast together;
//   - a bool tensor: a mask over as many dims as it has.
// Integers, slices, None and Ellipsis alone give a view (no copy); any tensor
// or bool entry gives a copy. Both record under autograd.

#include <cstdint>
#include <optional>
#include <type_traits>

#include "forge/tensor.h"

namespace forge::indexing {

struct EllipsisIndexType {};
inline constexpr EllipsisIndexType Ellipsis{};
inline constexpr std::nullopt_t None = std::nullopt;

class Slice {
 public:
  Slice(std::optional<std::int64_t> start = std::nullopt, std::optional<std::int64_t> stop = std::nullopt,
        std::optional<std::int64_t> step = std::nullopt)
      : start_(start), stop_(stop), step_(step) {}
  std::optional<std::int64_t> start() const noexcept { return start_; }
  std::optional<std::int64_t> stop() const noexcept { return stop_; }
  std::optional<std::int64_t> step() const noexcept { return step_; }

 private:
  std::optional<std::int64_t> start_, stop_, step_;
};

enum class TensorIndexType : std::uint8_t { none, ellipsis, integer, boolean, slice, tensor };

class TensorIndex {
 public:
  TensorIndex(std::nullopt_t) noexcept : type_(TensorIndexType::none) {}
  TensorIndex(EllipsisIndexType) noexcept : type_(TensorIndexType::ellipsis) {}
  // "..." only (any other string is invalid_argument).
  TensorIndex(const char* ellipsis);
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  TensorIndex(T integer) noexcept : type_(TensorIndexType::integer), integer_(static_cast<std::int64_t>(integer)) {}
  TensorIndex(bool boolean) noexcept : type_(TensorIndexType::boolean), boolean_(boolean) {}
  TensorIndex(Slice slice) noexcept : type_(TensorIndexType::slice), slice_(slice) {}
  TensorIndex(Tensor tensor) noexcept : type_(TensorIndexType::tensor), tensor_(std::move(tensor)) {}

  TensorIndexType type() const noexcept { return type_; }
  bool is_none() const noexcept { return type_ == TensorIndexType::none; }
  bool is_ellipsis() const noexcept { return type_ == TensorIndexType::ellipsis; }
  bool is_integer() const noexcept { return type_ == TensorIndexType::integer; }
  bool is_boolean() const noexcept { return type_ == TensorIndexType::boolean; }
  bool is_slice() const noexcept { return type_ == TensorIndexType::slice; }
  bool is_tensor() const noexcept { return type_ == TensorIndexType::tensor; }
  std::int64_t integer() const noexcept { return integer_; }
  bool boolean() const noexcept { return boolean_; }
  const Slice& slice() const noexcept { return slice_; }
  const Tensor& tensor() const noexcept { return tensor_; }

 private:
  TensorIndexType type_;
  std::int64_t integer_ = 0;
  bool boolean_ = false;
  Slice slice_;
  Tensor tensor_;
};

}  // namespace forge::indexing
