#include "forge/buffer.h"

#include <utility>

#include "core/internal.h"
#include "forge/error.h"

namespace forge {
namespace {

// Owns one borrowed buffer: deletes the header and runs the caller's release
// exactly once (the refcount reaches zero once).
class BorrowOwner final : public BufferOwner {
 public:
  explicit BorrowOwner(std::function<void()> on_release) : on_release_(std::move(on_release)) {}
  void release(Buffer* buffer) noexcept override {
    auto on_release = std::move(on_release_);
    delete buffer;
    delete this;
    if (on_release) {
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
};

}  // namespace

Ref<Buffer> Buffer::borrow(void* data, std::size_t nbytes, Device device,
                           std::function<void()> on_release) try {
  auto* owner = new BorrowOwner(std::move(on_release));
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
} FORGE_CATCH_OOM("borrow")

}  // namespace forge
