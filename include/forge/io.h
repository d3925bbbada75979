#pragma once
// forge::io: tensors to and from files (safetensors checkpoints, .npy arrays).

#include "forge/io/npy.h"
#include "forge/io/safetensors.h"
