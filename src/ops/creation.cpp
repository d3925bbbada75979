#include <cmath>
#include <cstring>
#include <limits>

#include "core/convert.h"
#include "core/internal.h"
#include "core/tensor_internal.h"
#include "forge/exec_context.h"
#include "ops/elementwise_internal.h"

namespace forge {
namespace {

Tensor fresh(ExecContext& ctx, const char* op, const Shape& shape, DType dtype) {
  return detail::allocate(ctx.runtime(), shape, dtype, op);
}

// Fills a fresh packed tensor by the copy family's generate entry.
void generate(const char* op, Tensor& t, const backend::SequenceSpec& spec, std::mt19937_64* generator = nullptr) {
  if (t.numel() == 0) return;
  detail::DeviceRuntime& dev = detail::device_runtime(t);
  dev.kernels().copy.generate.get(op, t.dtype(), dev)(dev, t.dtype(), t.numel(), detail::first_element(t), spec,
                                                      generator);
}

// The first and last values of a range fit the dtype (Note [Scalar
// conversion]); the values between lie between them.
void check_ends(const char* op, double first, double last, DType dtype) {
  detail::checked_slot(op, dtype, first, "start");
  detail::checked_slot(op, dtype, last, "last value");
}

// The integers every value of [lowest, highest] of which is exact in dtype.
struct IntegerRange {
  std::int64_t lowest, highest;
};
IntegerRange exact_integers(DType dtype) {
  switch (dtype) {
    case DType::boolean:
      return {0, 1};
    case DType::u8:
      return {0, 255};
    case DType::i8:
      return {-128, 127};
    case DType::i32:
      return {std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()};
    case DType::i64:
      return {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()};
    case DType::f16:
      return {-(1 << 11), 1 << 11};
    case DType::bf16:
      return {-(1 << 8), 1 << 8};
    case DType::f32:
      return {-(1 << 24), 1 << 24};
    case DType::f64:
      return {-(std::int64_t{1} << 53), std::int64_t{1} << 53};
  }
  return {0, 0};
}

// Draws from the context's generator into a fresh tensor (rand, randn, randint, randperm).
Tensor drawn(ExecContext& ctx, const char* op, const Shape& shape, DType dtype, const backend::SequenceSpec& spec) {
  Tensor t = fresh(ctx, op, shape, dtype);
  const detail::Generator::Lease lease = ctx.runtime().generator().lease(op);
  generate(op, t, spec, &*lease);
  detail::adopt_output(t);
  return t;
}

}  // namespace

Tensor ExecContext::empty(const Shape& shape, DType dtype) try {
  Tensor t = fresh(*this, "empty", shape, dtype);
  detail::adopt_output(t);
  return t;
}
FORGE_CATCH_OOM("empty")

Tensor ExecContext::filled(const char* op, const Shape& shape, Scalar value, DType dtype) try {
  detail::ScalarSlot element = detail::checked_slot(op, dtype, value, "value");
  Tensor t = fresh(*this, op, shape, dtype);
  detail::fill(op, t, shape, detail::operand(t), element.data());
  detail::adopt_output(t);
  return t;
}
FORGE_CATCH_OOM(op)

Tensor ExecContext::full(const Shape& shape, Scalar value, DType dtype) { return filled("full", shape, value, dtype); }
Tensor ExecContext::zeros(const Shape& shape, DType dtype) { return filled("zeros", shape, 0.0, dtype); }
Tensor ExecContext::ones(const Shape& shape, DType dtype) { return filled("ones", shape, 1.0, dtype); }

Tensor ExecContext::arange(double start, double end, double step, DType dtype) try {
  FORGE_CHECK(step != 0 && std::isfinite(step), invalid_argument, "arange", "step must be finite and nonzero, got ",
              step);
  FORGE_CHECK(std::isfinite(start) && std::isfinite(end), invalid_argument, "arange", "bounds must be finite, got [",
              start, ", ", end, ")");
  FORGE_CHECK((end - start) / step >= 0 || start == end, invalid_argument, "arange", "step ", step,
              " moves away from end: start ", start, ", end ", end);
  const double count = std::ceil((end - start) / step);
  FORGE_CHECK(count < 9.0e15, invalid_argument, "arange", "start ", start, ", end ", end, ", step ", step,
              " gives too many elements");
  const auto n = static_cast<std::int64_t>(std::max(0.0, count));
  if (n > 0) check_ends("arange", start, start + static_cast<double>(n - 1) * step, dtype);
  Tensor t = fresh(*this, "arange", Shape{n}, dtype);
  generate("arange", t, {.kind = backend::Sequence::arange, .start = start, .step = step});
  detail::adopt_output(t);
  return t;
}
FORGE_CATCH_OOM("arange")

Tensor ExecContext::linspace(double start, double end, std::int64_t steps, DType dtype) try {
  FORGE_CHECK(steps >= 0, invalid_argument, "linspace", "number of steps must be non-negative, got ", steps);
  if (steps > 0) check_ends("linspace", start, steps > 1 ? end : start, dtype);
  Tensor t = fresh(*this, "linspace", Shape{steps}, dtype);
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  // Fill symmetric from both ends, as libtorch does, so the last value is `end` exactly.
  const std::int64_t half = steps == 1 ? 1 : steps / 2;
  generate("linspace", t,
           {.kind = backend::Sequence::linspace, .start = start, .step = step, .end = end, .half = half});
  detail::adopt_output(t);
  return t;
}
FORGE_CATCH_OOM("linspace")

Tensor ExecContext::eye(std::int64_t n, std::int64_t m, DType dtype) try {
  if (m < 0) m = n;
  FORGE_CHECK(n >= 0, invalid_argument, "eye", "n must be non-negative, got ", n);
  Tensor t = fresh(*this, "eye", Shape{n, m}, dtype);
  generate("eye", t, {.kind = backend::Sequence::eye, .columns = m});
  detail::adopt_output(t);
  return t;
}
FORGE_CATCH_OOM("eye")

Tensor ExecContext::rand(const Shape& shape, DType dtype) try {
  FORGE_CHECK(is_floating(dtype), dtype, "rand", "needs a floating dtype, got ", dtype_name(dtype));
  // Draw with the target's own precision (11 bits for f16, 8 for bf16, 24 for
  // f32, 53 for f64), so rounding into the dtype can never reach 1.
  const int bits = dtype == DType::f16 ? 11 : dtype == DType::bf16 ? 8 : dtype == DType::f32 ? 24 : 53;
  return drawn(*this, "rand", shape, dtype, {.kind = backend::Sequence::uniform, .bits = bits});
}
FORGE_CATCH_OOM("rand")

Tensor ExecContext::randn(const Shape& shape, DType dtype) try {
  FORGE_CHECK(is_floating(dtype), dtype, "randn", "needs a floating dtype, got ", dtype_name(dtype));
  return drawn(*this, "randn", shape, dtype, {.kind = backend::Sequence::normal});
}
FORGE_CATCH_OOM("randn")

Tensor ExecContext::randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype) try {
  FORGE_CHECK(low < high, invalid_argument, "randint", "low ", low, " must be less than high ", high);
  const IntegerRange exact = exact_integers(dtype);
  FORGE_CHECK(low >= exact.lowest && high - 1 <= exact.highest, out_of_range, "randint", "the range [", low, ", ", high,
              ") does not fit ", dtype_name(dtype), ": its integers are exact in [", exact.lowest, ", ", exact.highest,
              "]");
  const auto span = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  return drawn(*this, "randint", shape, dtype, {.kind = backend::Sequence::randint, .low = low, .span = span});
}
FORGE_CATCH_OOM("randint")

Tensor ExecContext::randperm(std::int64_t n, DType dtype) try {
  FORGE_CHECK(n >= 0, invalid_argument, "randperm", "n must be non-negative, got ", n);
  const IntegerRange exact = exact_integers(dtype);
  FORGE_CHECK(n - 1 <= exact.highest, out_of_range, "randperm", "n = ", n, " is too large for ", dtype_name(dtype),
              ": its integers are exact up to ", exact.highest);
  return drawn(*this, "randperm", Shape{n}, dtype, {.kind = backend::Sequence::randperm});
}
FORGE_CATCH_OOM("randperm")

Tensor ExecContext::from_host_checked(const void* data, std::size_t count, const Shape& shape, DType dtype) try {
  const std::int64_t n = detail::checked_numel("from_vector", shape, dtype);
  FORGE_CHECK(static_cast<std::size_t>(n) == count, shape, "from_vector", count, " values do not fill shape ", shape,
              " (", n, " elements)");
  Tensor t = detail::allocate(runtime(), shape, dtype, "from_vector");
  if (n > 0)
    detail::device_runtime(t).upload(detail::first_element(t), static_cast<const std::byte*>(data),
                                     count * dtype_size(dtype));
  detail::adopt_output(t);
  return t;
}
FORGE_CATCH_OOM("from_vector")

Tensor ExecContext::from_blob(void* data, const Shape& shape, DType dtype, std::function<void()> on_release) {
  return detail::blob_tensor(*this, device(), data, shape, dtype, std::move(on_release));
}

Tensor detail::blob_tensor(ExecContext& ctx, Device device, void* data, const Shape& shape, DType dtype,
                           std::function<void()> on_release) try {
  const std::int64_t n = detail::checked_numel("from_blob", shape, dtype);
  FORGE_CHECK(data != nullptr || n == 0, invalid_argument, "from_blob", "null data for shape ", shape);
  FORGE_CHECK(reinterpret_cast<std::uintptr_t>(data) % dtype_size(dtype) == 0, invalid_argument, "from_blob",
              "data at ", data, " is not aligned to ", dtype_size(dtype), " bytes for ", dtype_name(dtype));
  // The hook is armed only once the tensor exists: a failure after the
  // buffer was made releases it without handing the memory back.
  Ref<Buffer> buffer =
      detail::borrow_unarmed(data, static_cast<std::size_t>(n) * dtype_size(dtype), device, std::move(on_release));
  Buffer& bytes = *buffer.get();
  Tensor t(Ref<TensorImpl>::adopt(new TensorImpl(detail::internal, Ref<Runtime>::share(&ctx.runtime()),
                                                 std::move(buffer), shape, contiguous_strides(shape), 0, dtype)));
  detail::arm_borrowed(bytes);
  return t;
}
FORGE_CATCH_OOM("from_blob")

Tensor empty(const Shape& shape, DType dtype) { return ExecContext::current_or_throw("empty").empty(shape, dtype); }
Tensor zeros(const Shape& shape, DType dtype) { return ExecContext::current_or_throw("zeros").zeros(shape, dtype); }
Tensor ones(const Shape& shape, DType dtype) { return ExecContext::current_or_throw("ones").ones(shape, dtype); }
Tensor full(const Shape& shape, Scalar value, DType dtype) {
  return ExecContext::current_or_throw("full").full(shape, value, dtype);
}
Tensor arange(double start, double end, double step, DType dtype) {
  return ExecContext::current_or_throw("arange").arange(start, end, step, dtype);
}
Tensor linspace(double start, double end, std::int64_t steps, DType dtype) {
  return ExecContext::current_or_throw("linspace").linspace(start, end, steps, dtype);
}
Tensor eye(std::int64_t n, std::int64_t m, DType dtype) {
  return ExecContext::current_or_throw("eye").eye(n, m, dtype);
}
Tensor rand(const Shape& shape, DType dtype) { return ExecContext::current_or_throw("rand").rand(shape, dtype); }
Tensor randn(const Shape& shape, DType dtype) { return ExecContext::current_or_throw("randn").randn(shape, dtype); }
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype) {
  return ExecContext::current_or_throw("randint").randint(low, high, shape, dtype);
}
Tensor randperm(std::int64_t n, DType dtype) { return ExecContext::current_or_throw("randperm").randperm(n, dtype); }

}  // namespace forge
