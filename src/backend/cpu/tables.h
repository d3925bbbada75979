#pragma once
// The cpu backend's table, filled one family at a time: each family's
// <family>_table.cpp lists its kernels and their dtypes.

#include "backend/kernels.h"

namespace forge::cpu {

void fill_copy_table(backend::CopyKernels& k);
void fill_elementwise_table(backend::ElementwiseKernels& k);
void fill_reduce_table(backend::ReduceKernels& k);
void fill_nn_table(backend::NnKernels& k);
void fill_conv_table(backend::ConvKernels& k);
void fill_linalg_table(backend::LinalgKernels& k);
void fill_indexing_table(backend::IndexingKernels& k);
void fill_optim_table(backend::OptimKernels& k);
void fill_sort_table(backend::SortKernels& k);

}  // namespace forge::cpu
