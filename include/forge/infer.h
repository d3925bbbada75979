#pragma once
// Eager inference: what a model needs past training to serve requests
// (docs/INFERENCE.md). Each header of forge/infer/ states its own policy.

#include "forge/infer/decoder.h"
#include "forge/infer/encoder.h"
#include "forge/infer/generator.h"
#include "forge/infer/kv_cache.h"
#include "forge/infer/quant.h"
#include "forge/infer/tokenizer.h"
