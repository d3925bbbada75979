// The autocast region (forge/amp.h). The listed ops call detail::autocasts()
// first and, when it holds, call themselves again on detail::autocast() of
// their inputs: the second call sees no f32 input and runs as usual.

#include "forge/amp.h"
#include "forge/error.h"

namespace forge::amp {

AutocastGuard::AutocastGuard(DType dtype, bool enabled)
    : previous_enabled_(Autocast::enabled_), previous_dtype_(Autocast::dtype_) {
  FORGE_CHECK(dtype == DType::bf16 || dtype == DType::f16, dtype, "AutocastGuard",
              "autocast computes in bf16 or f16, not ", dtype_name(dtype));
  Autocast::enabled_ = enabled;
  Autocast::dtype_ = dtype;
}

AutocastGuard::~AutocastGuard() {
  Autocast::enabled_ = previous_enabled_;
  Autocast::dtype_ = previous_dtype_;
}

Tensor detail::autocast(const Tensor& t) { return is_f32(t) ? t.to(Autocast::dtype()) : t; }

}  // namespace forge::amp
