#pragma once
// The per-context state a Runtime keeps for forge's own sources, out of the
// public header: the exec-scope stack (forge/exec_scope.h is its public
// face) and the seeded RNG. A second thread using either while another
// holds it is refused (Note [One driving thread] in runtime.cpp).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "forge/buffer.h"
#include "forge/exec_scope.h"
#include "forge/ref.h"

namespace forge::detail {

class ScopeStack {
 public:
  // `context` names the context in a contended error.
  explicit ScopeStack(const void* context) noexcept : context_(context) {}

  // Makes room for one more adopt, so that no adopt can fail; call before
  // computing, once per output. Each call counts a pending adopt: an op that
  // allocates two outputs before adopting either (max along a dim), or an op
  // nested in another, still finds room for all of them. While a scope is
  // open, an op of another thread than the scopes' is refused here
  // (contended).
  void reserve(const char* op) {
    const std::thread::id owner = owner_.load(std::memory_order_acquire);
    if (owner == std::thread::id()) return;
    if (owner != std::this_thread::get_id()) [[unlikely]]
      refuse_other_thread(op, "its exec scopes are open on", owner);
    const std::size_t need = held_.size() + pending_ + 1;
    if (need > held_.capacity()) held_.reserve(std::max(need, held_.capacity() * 2 + 16));
    ++pending_;
  }
  // Hands an op's output to the innermost open scope when that scope holds
  // (ScopePolicy::hold; reserve() made room), and settles the reservation.
  void adopt(const Ref<Buffer>& buffer) noexcept;

  struct Frame {
    std::uint64_t id;
    std::size_t mark;          // index into held() where this scope begins
    std::size_t saved_window;  // the pool peak window of the enclosing scope
    ScopePolicy policy;
    std::uint64_t acquires_at_open;  // the pool's counters when the scope opened
    std::uint64_t system_allocations_at_open;
    // What run() recorded in a recompute scope, and what backward recomputed
    // while the scope was open (Note [Checkpoint stats] in exec_scope.cpp).
    std::size_t checkpoints = 0;
    std::size_t checkpoint_bytes = 0;
    std::size_t recomputes = 0;
    std::uint64_t recompute_ns = 0;
  };
  // After frames() changed: whether adopt() holds outputs now.
  void refresh() noexcept {
    holding_ = suspended_ == 0 && !frames_.empty() && frames_.back().policy == ScopePolicy::hold;
  }
  // The open frame of scope `id`, or nullptr.
  Frame* find(std::uint64_t id) noexcept {
    auto it = std::find_if(frames_.begin(), frames_.end(), [&](const Frame& f) { return f.id == id; });
    return it == frames_.end() ? nullptr : &*it;
  }
  // While it lives, no scope holds what ops produce: a checkpoint's recompute
  // makes activations that only its own backward reads (src/autograd/checkpoint.cpp).
  class Suspend {
   public:
    // Only the thread driving the scopes counts (any other one's ops are
    // refused while scopes are open).
    explicit Suspend(ScopeStack& stack) noexcept
        : stack_(stack), active_(stack.owner_.load(std::memory_order_acquire) == std::this_thread::get_id()) {
      if (!active_) return;
      ++stack_.suspended_;
      stack_.refresh();
    }
    ~Suspend() {
      if (!active_) return;
      --stack_.suspended_;
      stack_.refresh();
    }
    Suspend(const Suspend&) = delete;
    Suspend& operator=(const Suspend&) = delete;

   private:
    ScopeStack& stack_;
    bool active_;
  };
  // Makes the calling thread the scopes' owner (opening the outermost scope)
  // or checks that it is; releases ownership when the last scope closes.
  void claim(const char* op);
  void release_if_none_open() noexcept;
  [[noreturn]] void refuse_other_thread(const char* op, const char* what, std::thread::id holder) const;

  std::vector<Ref<Buffer>>& held() noexcept { return held_; }
  std::vector<Frame>& frames() noexcept { return frames_; }
  std::uint64_t next_id() noexcept { return next_id_++; }

 private:
  const void* context_;
  std::atomic<std::thread::id> owner_{};  // the thread whose scopes are open; id() when none
  std::vector<Ref<Buffer>> held_;
  // Reservations not yet adopted. An allocation that is never adopted (a
  // temporary) leaves one counted until the last scope closes: it costs a
  // spare slot, never a missing one.
  std::size_t pending_ = 0;
  std::vector<Frame> frames_;
  std::uint64_t next_id_ = 1;
  bool holding_ = false;  // the innermost open scope holds, and none is suspended
  int suspended_ = 0;     // live Suspend guards
};

// The seeded RNG of a Runtime (FORGE_SEED, ExecContext::manual_seed), leased
// to one thread per draw (Note [One driving thread]).
class Generator {
 public:
  Generator(const void* context, std::uint64_t seed) : context_(context), rng_(seed) {}

  // Held by one thread while it lives; a thread may lease again while it
  // holds it. `op` names the caller in a contended error.
  class Lease {
   public:
    std::mt19937_64& operator*() const noexcept { return generator_->rng_; }
    ~Lease() {
      if (outermost_) generator_->holder_.store(std::thread::id(), std::memory_order_release);
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

   private:
    friend class Generator;
    Lease(Generator* generator, bool outermost) noexcept : generator_(generator), outermost_(outermost) {}
    Generator* generator_;
    bool outermost_;
  };
  Lease lease(const char* op);

 private:
  const void* context_;
  std::mt19937_64 rng_;
  std::atomic<std::thread::id> holder_{};  // the thread leasing rng_; id() when none
};

}  // namespace forge::detail
