#pragma once
// Intrusive reference counting: Ref<T> is a smart handle over a T that derives
// from RefCounted<T>.
//
// Note [Refcount ordering]
// An increment only needs atomicity: whoever increments already holds a
// reference, so no other thread can be freeing the object (relaxed). A
// decrement must make every earlier write through this reference visible to
// the thread that sees the count reach zero and frees (acq_rel): release to
// publish our writes, acquire so the last owner sees everybody's. A count of
// one seen with an acquire load means we hold the only reference: nobody else
// can increment it (that needs a reference) or decrement it, so the last
// owner skips the read-modify-write, which is the costly part on the hot path
// (a chain of ops drops a sole-owned tensor and buffer every step).

#include <atomic>
#include <cstdint>
#include <utility>

namespace forge {

template <typename Derived>
class RefCounted {
 public:
  RefCounted() = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;

  void retain_ref() const noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release_ref() const noexcept {
    if (refs_.load(std::memory_order_acquire) == 1 || refs_.fetch_sub(1, std::memory_order_acq_rel) == 1)
      static_cast<Derived*>(const_cast<RefCounted*>(this))->on_last_release();
  }
  std::int32_t ref_count() const noexcept { return refs_.load(std::memory_order_relaxed); }

 protected:
  ~RefCounted() = default;
  // Re-arms a recycled object (a pooled buffer handed out again).
  void reset_ref_count() noexcept { refs_.store(1, std::memory_order_relaxed); }

 private:
  mutable std::atomic<std::int32_t> refs_{1};  // a new object starts owned by its creator
};

template <typename T>
class Ref {
 public:
  Ref() noexcept = default;
  Ref(std::nullptr_t) noexcept {}
  // Takes over a reference the caller already owns (a fresh object's initial one).
  static Ref adopt(T* p) noexcept {
    Ref r;
    r.p_ = p;
    return r;
  }
  // Adds a reference to an object someone else owns.
  static Ref share(T* p) noexcept {
    if (p) p->retain_ref();
    return adopt(p);
  }
  Ref(const Ref& o) noexcept : p_(o.p_) {
    if (p_) p_->retain_ref();
  }
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Ref& operator=(const Ref& o) noexcept {
    Ref(o).swap(*this);
    return *this;
  }
  Ref& operator=(Ref&& o) noexcept {
    Ref(std::move(o)).swap(*this);
    return *this;
  }
  ~Ref() {
    if (p_) p_->release_ref();
  }

  void swap(Ref& o) noexcept { std::swap(p_, o.p_); }
  void reset() noexcept { Ref().swap(*this); }
  T* release() noexcept { return std::exchange(p_, nullptr); }  // caller now owns the reference
  T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  friend bool operator==(const Ref& a, const Ref& b) noexcept { return a.p_ == b.p_; }

 private:
  T* p_ = nullptr;
};

}  // namespace forge
