#include "nn/owned.h"

#include <cstdlib>
#include <limits>

#include "core/tensor_internal.h"
#include "forge/autograd.h"

namespace forge::nn::detail {

Tensor owned_empty(ExecContext& ctx, const Shape& shape, DType dtype, const char* op) {
  if (!ctx.device().is_cpu()) return forge::detail::allocate_owned(ctx.runtime(), shape, dtype, op);
  constexpr std::size_t kAlignmentBytes = 64;
  const std::int64_t n = checked_extents(shape, op);
  const std::size_t size = dtype_size(dtype);
  FORGE_CHECK(static_cast<std::uint64_t>(n) <= (std::numeric_limits<std::size_t>::max() - kAlignmentBytes) / size,
              out_of_memory, op, "shape ", shape, " of ", dtype_name(dtype), " is too large");
  // aligned_alloc wants a multiple of the alignment, and at least one block for empty tensors.
  const std::size_t bytes = static_cast<std::size_t>(n) * size;
  const std::size_t rounded =
      bytes == 0 ? kAlignmentBytes : (bytes + kAlignmentBytes - 1) / kAlignmentBytes * kAlignmentBytes;
  void* p = std::aligned_alloc(kAlignmentBytes, rounded);
  FORGE_CHECK(p != nullptr, out_of_memory, op, "cannot allocate ", rounded, " bytes for a tensor of shape ", shape);
  try {
    return ctx.from_blob(p, shape, dtype, [p] { std::free(p); });
  } catch (...) {
    std::free(p);
    throw;
  }
}

Tensor owned_copy(ExecContext& ctx, const Tensor& src, DType dtype, const char* op) {
  Tensor out = owned_empty(ctx, src.shape(), dtype, op);
  autograd::NoGradGuard no_grad;
  out.copy_(src.detach());
  return out;
}

ExecContext& context_of(const Tensor& t, const char* op) {
  ExecContext* ctx = ExecContext::current();
  FORGE_CHECK(ctx != nullptr && &ctx->runtime() == &t.runtime(), device, op,
              "the module's tensors belong to an ExecContext that is not the current one on this thread");
  return *ctx;
}

}  // namespace forge::nn::detail
