#pragma once
// forge::nn: modules (parameters, buffers and children by name, train/eval,
// dtype conversion, state dicts), the standard layers, attention, and
// parameter initializers.

#include "forge/nn/attention.h"
#include "forge/nn/containers.h"
#include "forge/nn/init.h"
#include "forge/nn/layers.h"
#include "forge/nn/module.h"
#include "forge/nn/sequential.h"
