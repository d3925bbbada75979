#include "forge/buffer.h"

#include <utility>

#include "core/internal.h"
#include "forge/error.h"

namespace forge {
namespace {

// Owns one borrowed buffer: deletes the header and runs the caller's release
// exactly once (the refcount reaches zero once), if armed.
class BorrowOwner final : public BufferOwner {
 public:
  BorrowOwner(std::function<void()> on_release, bool armed) : on_release_(std::move(on_release)), armed_(armed) {}
  void arm() noexcept { armed_ = true; }
  void release(Buffer* buffer) noexcept override {
    auto on_release = std::move(on_release_);
    const bool armed = armed_;
    delete buffer;
    delete this;
    if (armed && on_release) {
      try {
        on_release();
      } catch (...) {
        // A release hook has nowhere to report to (it runs inside a destructor);
        // a throwing hook is the caller's bug, and must not take the process down.
      }
    }
  }

 private:
  std::function<void()> on_release_;
  bool armed_;
};

Ref<Buffer> make_borrowed(void* data, std::size_t nbytes, Device device, std::function<void()> on_release, bool armed) {
  auto* owner = new BorrowOwner(std::move(on_release), armed);
  Buffer::Init init;
  init.data = static_cast<std::byte*>(data);
  init.nbytes = nbytes;
  init.capacity_bytes = nbytes;
  init.device = device;
  init.owner = owner;
  try {
    return Ref<Buffer>::adopt(new Buffer(detail::internal, init));
  } catch (...) {
    delete owner;
    throw;
  }
}

}  // namespace

Ref<Buffer> Buffer::borrow(void* data, std::size_t nbytes, Device device, std::function<void()> on_release) try {
  return make_borrowed(data, nbytes, device, std::move(on_release), true);
}
FORGE_CATCH_OOM("borrow")

namespace detail {

Ref<Buffer> borrow_unarmed(void* data, std::size_t nbytes, Device device, std::function<void()> on_release) {
  return make_borrowed(data, nbytes, device, std::move(on_release), false);
}

void arm_borrowed(Buffer& buffer) noexcept { static_cast<BorrowOwner*>(buffer.owner())->arm(); }

}  // namespace detail

}  // namespace forge
