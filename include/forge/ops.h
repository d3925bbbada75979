#pragma once
// Ops. Each validates its arguments (shapes, dtypes, contexts, aliasing,
// staleness), allocates its output from its inputs' context (or writes into the
// caller's `out` for the _into forms, or into a lent Arena for outputs whose
// size only the call knows), then calls an unchecked kernel. A failed op leaves
// its inputs untouched and the pool's outstanding count unchanged.

#include "forge/arena.h"
#include "forge/ops/elementwise.h"
#include "forge/ops/indexing.h"
#include "forge/ops/linalg.h"
#include "forge/ops/nn.h"
#include "forge/ops/reduce.h"
#include "forge/ops/shape_ops.h"
#include "forge/ops/sort.h"
#include "forge/tensor.h"

namespace forge {

// ---- calls whose output size only the call knows: outputs go to an Arena ----
// The elements of x where mask is true (mask broadcasts to x), in row-major order.
Tensor masked_select(const Tensor& x, const Tensor& mask, Arena* arena);
// The indices of x's nonzero elements, [count, x.dim()] i64.
Tensor nonzero(const Tensor& x, Arena* arena);
// The rows of x [N, D] whose mask [N] is true.
RowsView rows_where(const Tensor& x, const Tensor& mask, Arena* arena);
// For each row of mask [B, T]: the column indices of its true entries.
TapeView nonzero_per_row(const Tensor& mask, Arena* arena);
// For each item b of x [B, T, D]: the rows x[b, t] whose mask [B, T] is true.
RowsTapeView rows_where_per_item(const Tensor& x, const Tensor& mask, Arena* arena);

}  // namespace forge
