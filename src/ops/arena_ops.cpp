// Calls whose output size only the call knows. Each opens its ArenaCall first
// (which checks the arena and rewinds it), then validates its inputs, sizes
// every output and reserves them together, so a steady loop allocates once.
//
// Note [Arena outputs under autograd]
// masked_select records its output, as libtorch's does: the node saves the
// positions of the selected elements (a pool tensor, not the arena's bytes),
// and its gradient adds the output's gradient back at them. The output itself
// still becomes stale at the arena's next call; a node downstream that saved
// it then refuses to run backward (stale_output), so keep the arena for the
// step when such ops read it. The other calls refuse an input that requires
// grad, since their ragged views are not tensors a tape could continue from.

#include "autograd/record.h"
#include "autograd/rules/common.h"
#include "core/tensor_internal.h"
#include "forge/ops.h"

namespace forge {
namespace {

// A packed pool temporary holding `t` broadcast to `shape`, converted to `dtype`.
Tensor packed(const char* op, const Tensor& t, const Shape& shape, DType dtype) {
  Tensor out = detail::allocate(t.runtime(), shape, dtype, op);
  detail::copy_cast(op, out, shape, detail::operand(out), detail::operand_broadcast(t, shape));
  return out;
}

// A mask as 0/1 bytes (packed, any source dtype's "!= 0") and how many are set.
struct Flags {
  Tensor bytes;
  const std::uint8_t* data;
  std::int64_t count;
};

Flags flags_of(const char* op, const Tensor& t, const Shape& shape) {
  Flags f{packed(op, t, shape, DType::boolean), nullptr, 0};
  f.data = reinterpret_cast<const std::uint8_t*>(detail::first_element(f.bytes));
  detail::DeviceRuntime& dev = detail::device_runtime(f.bytes);
  f.count = dev.kernels().indexing.count_flags.get(op, DType::boolean, dev)(dev, shape.numel(), f.data);
  return f;
}

// The rows of `values` ([n, row_bytes] packed) whose flag is set, in order, into out.
void compact_rows(const char* op, Tensor& out, const Tensor& values, const std::uint8_t* flags, std::int64_t n,
                  std::size_t row_bytes) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  dev.kernels().indexing.compact_rows.get(op, out.dtype(), dev)(dev, n, row_bytes, flags, detail::first_element(values),
                                                                detail::first_element(out));
}

// flags [items, width]: offsets (items + 1) of each row's set flags and, when
// given, their columns.
void flag_rows(const char* op, const Flags& flags, std::int64_t items, std::int64_t width, Tensor& offsets,
               Tensor* columns) {
  detail::DeviceRuntime& dev = detail::device_runtime(offsets);
  dev.kernels().indexing.flag_rows.get(op, DType::boolean, dev)(
      dev, items, width, flags.data, reinterpret_cast<std::int64_t*>(detail::first_element(offsets)),
      columns ? reinterpret_cast<std::int64_t*>(detail::first_element(*columns)) : nullptr);
}

void check_mask(const char* op, const Tensor& mask) {
  detail::check_input(op, mask, "mask");
  FORGE_CHECK(mask.dtype() == DType::boolean, dtype, op, "mask must be bool, got ", dtype_name(mask.dtype()));
}

void check_pair(const char* op, const Tensor& x, const Tensor& mask) {
  detail::check_input(op, x, "x");
  check_mask(op, mask);
  detail::check_same_runtime(op, x, mask);
}

// For the calls that do not record (Note [Arena outputs under autograd]):
// refuse rather than hand back values whose gradient would silently be lost.
void check_unrecorded(const char* op, const Tensor& x) {
  FORGE_CHECK(!autograd::needs_grad(x), not_implemented, op, "x requires grad, and the outputs of ", op,
              " are not recorded by autograd; "
              "call under NoGradGuard or pass x.detach()");
}

// The flat positions (row-major over the flags' shape) of the set flags, [count] i64 from the pool.
Tensor flag_positions(const char* op, const Flags& flags, std::int64_t n) {
  Tensor positions = detail::allocate(flags.bytes.runtime(), Shape{flags.count, 1}, DType::i64, op);
  detail::DeviceRuntime& dev = detail::device_runtime(positions);
  dev.kernels().indexing.nonzero.get(op, DType::boolean, dev)(
      dev, Shape{n}, flags.data, reinterpret_cast<std::int64_t*>(detail::first_element(positions)));
  return positions.reshape(Shape{flags.count});
}

// The gradient of x (broadcast to `shape`) is zero but at the selected
// positions, which get the output's gradient in order.
void record_masked_select(const Tensor& out, const Tensor& x, const Tensor& positions, const Shape& shape) {
  autograd::record(out, "masked_select", autograd::inputs(x), autograd::saves(positions), [shape](autograd::Vjp& v) {
    const Tensor flat = autograd::rules::zeros_like_shape(v.grad(), Shape{shape.numel()}, v.grad().dtype());
    v.set(0, scatter_add(flat, 0, v.saved(0), v.grad()).reshape(shape));
  });
}

}  // namespace

Tensor masked_select(const Tensor& x, const Tensor& mask, Arena* arena) try {
  const char* op = "masked_select";
  ArenaCall call(op, arena, {x, mask});
  check_pair(op, x, mask);
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), op);
  const Flags flags = flags_of(op, mask, shape);
  const Tensor values = packed(op, x, shape, x.dtype());
  const Tensor positions = autograd::needs_grad(x) ? flag_positions(op, flags, shape.numel()) : Tensor();
  Tensor out = call.allocate(Shape{flags.count}, x.dtype());
  compact_rows(op, out, values, flags.data, shape.numel(), x.element_size());
  if (positions.defined()) record_masked_select(out, x, positions, shape);
  call.commit();
  return out;
}
FORGE_CATCH_OOM("masked_select")

Tensor nonzero(const Tensor& x, Arena* arena) try {
  const char* op = "nonzero";
  ArenaCall call(op, arena, {x});
  detail::check_input(op, x, "x");
  const Flags flags = flags_of(op, x, x.shape());
  const int rank = x.dim();
  Tensor out = call.allocate(Shape{flags.count, rank}, DType::i64);
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  dev.kernels().indexing.nonzero.get(op, DType::boolean, dev)(
      dev, x.shape(), flags.data, reinterpret_cast<std::int64_t*>(detail::first_element(out)));
  call.commit();
  return out;
}
FORGE_CATCH_OOM("nonzero")

RowsView rows_where(const Tensor& x, const Tensor& mask, Arena* arena) try {
  const char* op = "rows_where";
  ArenaCall call(op, arena, {x, mask});
  check_pair(op, x, mask);
  check_unrecorded(op, x);
  FORGE_CHECK(x.dim() == 2, shape, op, "x must be [N, D], got ", x.shape());
  FORGE_CHECK(mask.dim() == 1 && mask.size(0) == x.size(0), shape, op, "mask must be [", x.size(0), "], got ",
              mask.shape());
  const Flags flags = flags_of(op, mask, mask.shape());
  const Tensor values = packed(op, x, x.shape(), x.dtype());
  const std::int64_t cols = x.size(1);
  Tensor out = call.allocate(Shape{flags.count, cols}, x.dtype());
  compact_rows(op, out, values, flags.data, x.size(0), static_cast<std::size_t>(cols) * x.element_size());
  call.commit();
  return RowsView(std::move(out));
}
FORGE_CATCH_OOM("rows_where")

TapeView nonzero_per_row(const Tensor& mask, Arena* arena) try {
  const char* op = "nonzero_per_row";
  ArenaCall call(op, arena, {mask});
  check_mask(op, mask);
  FORGE_CHECK(mask.dim() == 2, shape, op, "mask must be [B, T], got ", mask.shape());
  const Flags flags = flags_of(op, mask, mask.shape());
  const std::int64_t items = mask.size(0), width = mask.size(1);
  call.reserve(ArenaCall::bytes_for(Shape{flags.count}, DType::i64) +
               ArenaCall::bytes_for(Shape{items + 1}, DType::i64));
  Tensor values = call.allocate(Shape{flags.count}, DType::i64);
  Tensor offsets = call.allocate(Shape{items + 1}, DType::i64);
  flag_rows(op, flags, items, width, offsets, &values);
  call.commit();
  return TapeView(std::move(values), std::move(offsets));
}
FORGE_CATCH_OOM("nonzero_per_row")

RowsTapeView rows_where_per_item(const Tensor& x, const Tensor& mask, Arena* arena) try {
  const char* op = "rows_where_per_item";
  ArenaCall call(op, arena, {x, mask});
  check_pair(op, x, mask);
  check_unrecorded(op, x);
  FORGE_CHECK(x.dim() == 3, shape, op, "x must be [B, T, D], got ", x.shape());
  FORGE_CHECK(mask.dim() == 2 && mask.size(0) == x.size(0) && mask.size(1) == x.size(1), shape, op, "mask must be [",
              x.size(0), ", ", x.size(1), "], got ", mask.shape());
  const Flags flags = flags_of(op, mask, mask.shape());
  const Tensor values = packed(op, x, x.shape(), x.dtype());
  const std::int64_t items = x.size(0), width = x.size(1), cols = x.size(2);
  call.reserve(ArenaCall::bytes_for(Shape{flags.count, cols}, x.dtype()) +
               ArenaCall::bytes_for(Shape{items + 1}, DType::i64));
  Tensor rows = call.allocate(Shape{flags.count, cols}, x.dtype());
  Tensor offsets = call.allocate(Shape{items + 1}, DType::i64);
  compact_rows(op, rows, values, flags.data, items * width, static_cast<std::size_t>(cols) * x.element_size());
  flag_rows(op, flags, items, width, offsets, nullptr);
  call.commit();
  return RowsTapeView(std::move(rows), std::move(offsets));
}
FORGE_CATCH_OOM("rows_where_per_item")

}  // namespace forge
