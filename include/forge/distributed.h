#pragma once
// forge::dist: data-parallel training across processes on Open MPI (host
// tensors) and NCCL (CUDA tensors), launched with mpirun (docs/DISTRIBUTED.md).

#include "forge/distributed/checkpoint.h"     // IWYU pragma: export
#include "forge/distributed/data_parallel.h"  // IWYU pragma: export
#include "forge/distributed/process_group.h"  // IWYU pragma: export
