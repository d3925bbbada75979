#pragma once
// Arena: memory a caller lends to calls for the outputs whose size only the
// call knows. A call given the arena rewinds it (every output of the previous
// call becomes stale), writes its outputs packed into it, and grows it only
// when the new outputs outsize everything it held, so a steady loop allocates
// once. The rules and statuses are in docs/MEMORY.md; ArenaCall is the entry
// point a call uses.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

#include "forge/device.h"
#include "forge/ref.h"
#include "forge/shape.h"
#include "forge/tensor.h"

namespace forge {

class ExecContext;
class Runtime;

namespace detail {
class ArenaCore;
}

struct ArenaDescription {
  Device device;            // where the outputs live
  std::string str() const;  // "host" or "cuda:N"
};

struct ArenaStats {
  std::size_t capacity_bytes = 0;    // bytes of the block a call fills next
  std::size_t used_bytes = 0;        // bytes the last call wrote
  std::size_t high_water_bytes = 0;  // the most any call wrote
  std::uint64_t calls = 0;
  std::uint64_t system_allocations = 0;
  std::uint64_t system_frees = 0;
};

class Arena {
 public:
  explicit Arena(ExecContext& ctx);  // allocates nothing
  ~Arena();
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  ArenaDescription describe() const;
  ArenaStats stats() const;

  // A call on a device arena returns once its work is queued (deferred): its
  // outputs are final, and the arena free for the next call, once the
  // device has run it. ready() tells whether it has; wait() waits for it.
  // A host arena is always ready.
  bool ready() const noexcept;
  void wait() const noexcept;

  // Test hook: the nth growth from now fails with out_of_memory (1 = the next); 0 turns it off.
  void fail_growth_after(std::uint64_t n) noexcept;

 private:
  friend class ArenaCall;
  detail::ArenaCore* core_;
};

// The entry point of a call that returns its outputs in an arena; a call
// constructs it before anything else. Constructing it validates the arena
// against the call (null: invalid_argument; an input of another context or
// device: device; already serving a call: contended; an input inside it:
// invalid_argument) and rewinds it. The call then validates its own inputs
// and takes its outputs from allocate(). If the call does not reach commit(),
// the destructor rewinds the arena again, so a failed call leaves no outputs.
class ArenaCall {
 public:
  ArenaCall(const char* op, Arena* arena, std::initializer_list<std::reference_wrapper<const Tensor>> inputs);
  ~ArenaCall();
  ArenaCall(const ArenaCall&) = delete;
  ArenaCall& operator=(const ArenaCall&) = delete;

  // The runtime the call runs on: the arena's.
  Runtime& runtime() const noexcept;
  // The arena bytes one output of `shape` and `dtype` takes (64-byte aligned).
  static std::size_t bytes_for(const Shape& shape, DType dtype);
  // Makes sure `bytes` of outputs fit without growing again during this call.
  void reserve(std::size_t bytes);
  // A contiguous output tensor inside the arena (uninitialised).
  Tensor allocate(const Shape& shape, DType dtype);
  void commit() noexcept { committed_ = true; }

 private:
  const char* op_;
  detail::ArenaCore* core_;
  void* previous_stream_ = nullptr;  // a device arena's call runs on the arena's stream
  bool committed_ = false;
};

// ---- ragged output views, laid out as Apache Arrow lays them ----
// Their constructors check the layout (invalid_argument otherwise), and their
// accessors check that the tensors are not stale arena outputs.

// One row per item: rows[i] starts at data() + i * row_stride_bytes().
class RowsView {
 public:
  RowsView() = default;
  explicit RowsView(Tensor rows);  // rank 2, unit stride along a row
  const Tensor& tensor() const noexcept { return rows_; }
  const void* data() const { return rows_.raw_data("RowsView"); }
  std::int64_t count() const { return rows_.defined() ? rows_.size(0) : 0; }
  std::int64_t columns() const { return rows_.defined() ? rows_.size(1) : 0; }
  std::size_t row_stride_bytes() const {
    return rows_.defined() ? static_cast<std::size_t>(rows_.stride(0)) * rows_.element_size() : 0;
  }
  DType dtype() const { return rows_.defined() ? rows_.dtype() : DType::f32; }

 private:
  Tensor rows_;
};

// Elements end to end, with count + 1 offsets: item i is values[offsets[i], offsets[i+1]).
class TapeView {
 public:
  TapeView() = default;
  TapeView(Tensor values, Tensor offsets);  // values rank 1; offsets contiguous i64 [count + 1]
  const Tensor& values() const noexcept { return values_; }
  const Tensor& offsets() const noexcept { return offsets_; }
  std::int64_t count() const { return offsets_.defined() ? offsets_.numel() - 1 : 0; }
  const void* data() const { return values_.raw_data("TapeView"); }
  const std::int64_t* offsets_data() const { return offsets_.data_ptr<std::int64_t>(); }
  Tensor item(std::int64_t i) const;  // a view of item i's elements

 private:
  Tensor values_;
  Tensor offsets_;
};

// Packed rows with count + 1 row offsets: item i is rows[offsets[i], offsets[i+1]).
class RowsTapeView {
 public:
  RowsTapeView() = default;
  RowsTapeView(Tensor rows, Tensor offsets);  // rows rank 2; offsets contiguous i64 [count + 1]
  const Tensor& rows() const noexcept { return rows_; }
  const Tensor& offsets() const noexcept { return offsets_; }
  std::int64_t count() const { return offsets_.defined() ? offsets_.numel() - 1 : 0; }
  std::int64_t columns() const { return rows_.defined() ? rows_.size(1) : 0; }
  const void* data() const { return rows_.raw_data("RowsTapeView"); }
  const std::int64_t* offsets_data() const { return offsets_.data_ptr<std::int64_t>(); }
  Tensor item(std::int64_t i) const;  // a view of item i's rows

 private:
  Tensor rows_;
  Tensor offsets_;
};

}  // namespace forge
