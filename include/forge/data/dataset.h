#pragma once
// Datasets: numbered examples a DataLoader gathers into batches.
//
//   struct Squares : data::Dataset {
//     std::int64_t size() const override { return 100; }
//     void fill(std::int64_t i, data::Example& out) const override {
//       out.input.reset({1}, DType::f32);
//       out.input.as<float>()[0] = float(i);
//       out.target.reset({}, DType::i64);
//       out.target.as<std::int64_t>()[0] = i * i;
//     }
//   };
//
// An example is host memory, never a Tensor (Note [Dataset examples are host
// arrays] in src/data/dataset.cpp): fill() runs on the loader's worker
// threads, and only the thread that drives an ExecContext may make its
// tensors. So fill() writes into an Example the loader owns and reuses: after
// the first batch a steady loop allocates nothing, on any thread.
//
// fill() must be safe to call from several threads at once, on different
// Examples (read-only state, or the dataset's own locking), and must not
// touch an ExecContext or a Tensor. It may throw: the loader hands the
// exception to the caller's next().

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "forge/dtype.h"
#include "forge/shape.h"
#include "forge/tensor.h"

namespace forge::data {

// A row-major host array: a shape, a dtype and its bytes, or undefined. Its
// memory is kept across reset()s, so refilling it costs no allocation once
// it has held an array as large.
class HostArray {
 public:
  HostArray() = default;

  // Makes this a `shape` array of `dtype` (contents unspecified) and returns
  // its bytes, to be filled. Throws invalid_argument for a negative extent.
  std::byte* reset(const Shape& shape, DType dtype);
  void clear() noexcept { defined_ = false; }  // undefined again (an absent target)

  bool defined() const noexcept { return defined_; }
  const Shape& shape() const noexcept { return shape_; }
  DType dtype() const noexcept { return dtype_; }
  std::int64_t numel() const noexcept { return shape_.numel(); }
  std::size_t nbytes() const noexcept { return defined_ ? bytes_.size() : 0; }
  std::byte* data() noexcept { return bytes_.data(); }
  const std::byte* data() const noexcept { return bytes_.data(); }

  // The elements as T (which must be the dtype's C++ type). The bytes are
  // aligned for any scalar type.
  template <typename T>
  T* as() noexcept {
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <typename T>
  const T* as() const noexcept {
    return reinterpret_cast<const T*>(bytes_.data());
  }
  // A copy of the elements (checked against the dtype).
  template <typename T>
  std::vector<T> to_vector() const {
    check_type(dtype_of<T>::value);
    return {as<T>(), as<T>() + numel()};
  }

 private:
  void check_type(DType wanted) const;

  Shape shape_;
  DType dtype_ = DType::f32;
  bool defined_ = false;
  std::vector<std::byte> bytes_;  // operator new's memory: aligned for every dtype
};

struct Example {
  HostArray input;
  HostArray target;  // undefined when the dataset has no targets
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual std::int64_t size() const = 0;
  // Writes example i into `out`, reusing its memory (reset() input and
  // target, or clear() the target). The loader calls it only with
  // 0 <= i < size(), from worker threads: see the rules at the top.
  virtual void fill(std::int64_t i, Example& out) const = 0;

  // Example i in a fresh Example; throws out_of_range outside [0, size()).
  Example get(std::int64_t i) const;
};

// Rows of tensors: example i is inputs[i] (and targets[i]).
class TensorDataset final : public Dataset {
 public:
  // inputs [N, ...]; targets [N, ...] or undefined. Read on the host: a
  // strided or device tensor is copied to packed host memory once, here, on
  // the calling thread. The tensors must not be written while the dataset
  // lives, and it must be destroyed on the thread that drives their context
  // (a loader holding it destroys it in its own destructor).
  explicit TensorDataset(Tensor inputs, Tensor targets = Tensor());

  std::int64_t size() const override { return size_; }
  void fill(std::int64_t i, Example& out) const override;

  const Tensor& inputs() const noexcept { return inputs_; }    // packed, on the host
  const Tensor& targets() const noexcept { return targets_; }  // packed, on the host, or undefined

 private:
  struct Rows {
    bool defined = false;
    const std::byte* base = nullptr;  // read by worker threads: never a Tensor call there
    std::size_t row_bytes = 0;
    Shape row_shape;
    DType dtype = DType::f32;
    void copy(std::int64_t i, HostArray& out) const;
  };

  Tensor inputs_;
  Tensor targets_;
  std::int64_t size_ = 0;
  Rows input_rows_;
  Rows target_rows_;
};

namespace detail {
// The checks a TensorDataset's tensors pass, reported as errors of `op`.
void check_dataset_tensors(const char* op, const Tensor& inputs, const Tensor& targets);
}  // namespace detail

}  // namespace forge::data
