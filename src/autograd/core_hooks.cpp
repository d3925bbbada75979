// What the core asks of autograd (Note [Core and autograd] in
// src/core/autograd_hooks.h).

#include "autograd/meta.h"
#include "core/autograd_hooks.h"
#include "forge/autograd.h"

namespace forge::detail {

void release_autograd(TensorImpl& t) noexcept { AutogradAccess::destroy(t); }

bool grad_mode_enabled() noexcept { return autograd::GradMode::is_enabled(); }

}  // namespace forge::detail
