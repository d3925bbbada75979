// Streams (include/forge/stream.h) over a device runtime's StreamDriver.

#include "forge/stream.h"

#include <utility>

#include "backend/device_runtime.h"
#include "core/tensor_internal.h"
#include "forge/error.h"
#include "forge/exec_context.h"
#include "forge/runtime.h"

namespace forge {

Stream::Stream(Ref<Runtime> runtime, Device device, void* handle) noexcept
    : runtime_(std::move(runtime)), device_(device), handle_(handle) {}

namespace {
detail::StreamDriver* driver_of(const Ref<Runtime>& rt, Device device) {
  return rt ? rt->device_runtime(device, "stream").streams() : nullptr;
}
}  // namespace

namespace {
// A failure a wait reports: the device error of the work queued before it.
[[noreturn]] void fail_wait(detail::StreamDriver& d, const char* op, Device device) {
  FORGE_FAIL(device, op, "work queued on ", device.str(), " failed: ", d.take_error());
}
}  // namespace

void Stream::synchronize() const {
  if (detail::StreamDriver* d = driver_of(runtime_, device_))
    if (!d->synchronize(handle_)) fail_wait(*d, "Stream::synchronize", device_);
}

bool Stream::query() const {
  detail::StreamDriver* d = driver_of(runtime_, device_);
  return d == nullptr || d->stream_done(handle_);
}

Event Stream::record() const {
  detail::StreamDriver* d = driver_of(runtime_, device_);
  if (d == nullptr) return Event();
  detail::EventId e = d->record_event(handle_);
  FORGE_CHECK(e != nullptr, device, "Stream::record", "could not record an event on ", device_.str());
  return Event(runtime_, device_, e);
}

void Stream::wait(const Event& event) const {
  detail::StreamDriver* d = driver_of(runtime_, device_);
  if (d == nullptr || event.handle_ == nullptr) return;
  FORGE_CHECK(event.device_ == device_ && event.runtime_.get() == runtime_.get(), device, "Stream::wait",
              "the event belongs to another device or ExecContext");
  if (!d->stream_wait(handle_, event.handle_)) d->wait_event(event.handle_);  // no device wait: the host waits
}

Event::Event(Ref<Runtime> runtime, Device device, void* handle) noexcept
    : runtime_(std::move(runtime)), device_(device), handle_(handle) {}
Event::~Event() { reset(); }
Event::Event(Event&& other) noexcept
    : runtime_(std::move(other.runtime_)), device_(other.device_), handle_(std::exchange(other.handle_, nullptr)) {}
Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    reset();
    runtime_ = std::move(other.runtime_);
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}
void Event::reset() noexcept {
  if (handle_ != nullptr) runtime_->find_device_runtime(device_)->streams()->destroy_event(handle_);
  handle_ = nullptr;
}
bool Event::query() const {
  return handle_ == nullptr || runtime_->find_device_runtime(device_)->streams()->event_done(handle_);
}
void Event::synchronize() const {
  if (handle_ == nullptr) return;
  detail::StreamDriver& d = *runtime_->find_device_runtime(device_)->streams();
  if (!d.wait_event(handle_)) fail_wait(d, "Event::synchronize", device_);
}

StreamGuard::StreamGuard(const Stream& stream) : stream_(stream) {
  if (detail::StreamDriver* d = driver_of(stream_.runtime_, stream_.device_)) {
    previous_ = d->current_stream();
    d->set_current_stream(stream_.handle_);
  }
}

StreamGuard::~StreamGuard() {
  if (stream_.runtime_) {
    if (detail::StreamDriver* d = stream_.runtime_->find_device_runtime(stream_.device_)->streams())
      d->set_current_stream(previous_);
  }
}

Stream ExecContext::stream() const {
  detail::DeviceRuntime& dev = runtime_->compute();
  detail::StreamDriver* d = dev.streams();
  return Stream(runtime_, dev.device(), d != nullptr ? d->current_stream() : nullptr);
}

Stream ExecContext::new_stream() {
  detail::DeviceRuntime& dev = runtime_->compute();
  return Stream(runtime_, dev.device(), dev.new_stream("new_stream"));
}

void Tensor::record_stream(const Stream& stream) const {
  detail::check_readable("record_stream", *this, "tensor");
  FORGE_CHECK(stream.device() == device(), device, "record_stream", "the tensor is on ", device().str(),
              ", the stream on ", stream.device().str());
  FORGE_CHECK(stream.runtime_.get() == &runtime(), device, "record_stream",
              "the stream belongs to another ExecContext");
  if (buffer()->pooled()) detail::device_runtime(*this).pool().record_stream(*buffer(), stream.native());
}

}  // namespace forge
