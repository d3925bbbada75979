#pragma once
// The kernel table: one struct of entries per family (backend/kernels/*.h),
// each entry a function pointer and the dtypes it computes in (Entry in
// backend/backend.h). A family's header also defines the device-neutral
// arguments its kernels take (operands, problem descriptions), so that ops
// name no backend.

#include "backend/kernels/conv.h"
#include "backend/kernels/copy.h"
#include "backend/kernels/elementwise.h"
#include "backend/kernels/indexing.h"
#include "backend/kernels/linalg.h"
#include "backend/kernels/nn.h"
#include "backend/kernels/optim.h"
#include "backend/kernels/reduce.h"
#include "backend/kernels/sort.h"

namespace forge::backend {

struct Kernels {
  CopyKernels copy;                // copy_cast, fill, generate (sequences and draws)
  ElementwiseKernels elementwise;  // binary, unary, where, their backward
  ReduceKernels reduce;            // reductions, arg reductions, scans
  NnKernels nn;                    // softmax, layer and RMS norms, losses, and their backward
  ConvKernels conv;                // conv2d, pooling, and their backward
  LinalgKernels linalg;            // matmul, attention
  IndexingKernels indexing;        // gather/scatter, take, shape-op copies, masks
  OptimKernels optim;              // optimizer steps, gradient norms
  SortKernels sort;                // sort, topk, searchsorted, multinomial
};

// Calls f(family, name, entry) for every entry of `table` (a Kernels, const
// or not), family by family in the order above.
template <typename Table, typename F>
void for_each_entry(Table& table, F&& f) {
  const auto in = [&f](const char* family) {
    return [&f, family](const char* name, auto& entry) { f(family, name, entry); };
  };
  CopyKernels::visit(table.copy, in("copy"));
  ElementwiseKernels::visit(table.elementwise, in("elementwise"));
  ReduceKernels::visit(table.reduce, in("reduce"));
  NnKernels::visit(table.nn, in("nn"));
  ConvKernels::visit(table.conv, in("conv"));
  LinalgKernels::visit(table.linalg, in("linalg"));
  IndexingKernels::visit(table.indexing, in("indexing"));
  OptimKernels::visit(table.optim, in("optim"));
  SortKernels::visit(table.sort, in("sort"));
}

}  // namespace forge::backend
