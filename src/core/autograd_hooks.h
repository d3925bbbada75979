#pragma once
// Note [Core and autograd]
// The core keeps a tensor's autograd state opaquely (TensorImpl's grad_fn_
// and autograd_ pointers) and includes nothing of autograd: the floors point
// down. What the core must ask of autograd is declared here and defined by
// autograd (src/autograd/core_hooks.cpp), as c10 leaves AutogradMeta to the
// autograd library behind an interface. A link-time interface rather than a
// table autograd registers at start-up: forge is a static library, and a
// registrar object nothing references would be dropped by the linker.

namespace forge {
class TensorImpl;
}

namespace forge::detail {

// Releases t's autograd state (its grad_fn reference and .grad); the core
// calls it from ~TensorImpl only when t has any.
void release_autograd(TensorImpl& t) noexcept;
// Whether autograd records on this thread (autograd::GradMode).
bool grad_mode_enabled() noexcept;

}  // namespace forge::detail
