// Transfers between the host and a context's device: Tensor::to(Device),
// cpu(), cuda(i), and the device half of copy_ and from_vector. A context
// serves the host and its own device (Note [A context computes on its
// device] in runtime.cpp); the bytes move through the device runtime's
// upload/download (Note [Staged uploads] in backend/cuda/cuda_runtime.cpp).

#include "backend/device_runtime.h"
#include "core/internal.h"
#include "core/tensor_internal.h"
#include "forge/error.h"
#include "forge/runtime.h"
#include "forge/tensor.h"

namespace forge {

Tensor detail::packed_where_it_is(const Tensor& t, const char* op) {
  return t.is_contiguous() ? t : detail::cast_temporary(t, t.dtype(), op);
}

Tensor Tensor::to(Device target, bool non_blocking) const try {
  const char* op = "to";
  detail::check_readable(op, *this, "tensor");
  if (target == device()) return *this;
  Runtime& rt = runtime();
  detail::DeviceRuntime& dst_dev = rt.device_runtime(target, op);
  detail::DeviceRuntime& src_dev = detail::device_runtime(*this);
  FORGE_CHECK(target.is_cpu() || device().is_cpu(), device, op, "a copy from ", device().str(), " to ", target.str(),
              " goes through the host: call .cpu() first");
  const Tensor src = detail::packed_where_it_is(*this, op);
  BufferPool* pinned = non_blocking && target.is_cpu() ? src_dev.pinned_pool() : nullptr;
  Tensor out = pinned != nullptr ? detail::allocate_in(rt, *pinned, shape(), dtype(), op)
                                 : detail::allocate_in(rt, dst_dev.pool(), shape(), dtype(), op);
  if (target.is_cpu()) {
    src_dev.download(detail::first_element(out), detail::first_element(src), src.nbytes(), non_blocking);
    if (non_blocking) src_dev.keep_until_done(out.buffer());
  } else
    dst_dev.upload(detail::first_element(out), detail::first_element(src), src.nbytes());
  detail::adopt_output(out);
  return out;
}
FORGE_CATCH_OOM("to")

}  // namespace forge
