#pragma once
// Memory a module owns (DESIGN §1): weights live in 64-byte aligned host
// memory outside the BufferPool, wrapped with ExecContext::from_blob, so the
// pool neither counts nor caches them and the bytes are freed when the last
// view of them dies.

#include "forge/exec_context.h"
#include "forge/tensor.h"

namespace forge::nn::detail {

// An uninitialized contiguous tensor in owned memory.
Tensor owned_empty(ExecContext& ctx, const Shape& shape, DType dtype, const char* op);
// A packed copy of `src` converted to `dtype`, in owned memory, cut from the tape.
Tensor owned_copy(ExecContext& ctx, const Tensor& src, DType dtype, const char* op);
// The current context when `t` belongs to it; else a device error naming op.
ExecContext& context_of(const Tensor& t, const char* op);

}  // namespace forge::nn::detail
