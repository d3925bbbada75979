#pragma once
// The umbrella header: everything a program using forge needs.

#include "forge/arena.h"
#include "forge/autograd.h"
#include "forge/buffer.h"
#include "forge/buffer_pool.h"
#include "forge/device.h"
#include "forge/dtype.h"
#include "forge/error.h"
#include "forge/exec_context.h"
#include "forge/exec_scope.h"
#include "forge/ops.h"
#include "forge/optim/adam.h"
#include "forge/ref.h"
#include "forge/scalar.h"
#include "forge/runtime.h"
#include "forge/shape.h"
#include "forge/tensor.h"
