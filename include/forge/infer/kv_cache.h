#pragma once
// KvCache: the keys and values a decoder has seen, kept so that a decode step
// attends to them without recomputing them.
//
// - Per layer, K and V are [batch, n_kv_heads, max_len, head_dim] in f32, f16
//   or bf16, allocated once when the cache is built, in memory the cache owns
//   (not the BufferPool), so the pool's transients never mix with them.
// - Each sequence of the batch has its own length. A step writes its new rows
//   in place at each sequence's length; attention reads narrow(2, 0, len)
//   views of the buffers (no copy).
// - reset() / reset(seq) set lengths to 0 and keep the memory.
// - A cache larger than physical RAM is refused up front (out_of_memory,
//   stating the bytes); a step that would run past max_len is refused
//   (invalid_argument) before anything is written.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "forge/dtype.h"
#include "forge/exec_context.h"
#include "forge/tensor.h"

namespace forge::infer {

struct DecoderConfig;

class KvCache {
 public:
  KvCache(ExecContext& ctx, const DecoderConfig& config, std::int64_t batch, std::int64_t max_len,
          DType dtype = DType::f32);
  // The same cache shape without a config: n_layers layers of [batch, n_kv_heads, max_len, head_dim].
  KvCache(ExecContext& ctx, std::int64_t n_layers, std::int64_t batch, std::int64_t n_kv_heads, std::int64_t max_len,
          std::int64_t head_dim, DType dtype = DType::f32);

  std::int64_t n_layers() const noexcept { return n_layers_; }
  std::int64_t batch() const noexcept { return batch_; }
  std::int64_t n_kv_heads() const noexcept { return n_kv_heads_; }
  std::int64_t max_len() const noexcept { return max_len_; }
  std::int64_t head_dim() const noexcept { return head_dim_; }
  DType dtype() const noexcept { return dtype_; }
  // Bytes of all layers' K and V.
  std::size_t bytes() const noexcept { return bytes_; }
  // The bytes a cache of this shape would take (what the constructor checks against RAM).
  static std::size_t bytes_for(std::int64_t n_layers, std::int64_t batch, std::int64_t n_kv_heads, std::int64_t max_len,
                               std::int64_t head_dim, DType dtype);

  // Positions held by sequence `seq`, and by all of them.
  std::int64_t length(std::int64_t seq = 0) const;
  std::span<const std::int64_t> lengths() const noexcept { return lengths_; }
  // The longest sequence's length.
  std::int64_t max_length() const noexcept;

  void reset() noexcept;
  void reset(std::int64_t seq);

  // The whole buffers of a layer, [batch, n_kv_heads, max_len, head_dim].
  const Tensor& keys(std::int64_t layer) const;
  const Tensor& values(std::int64_t layer) const;
  // Zero-copy views of sequences [seq, seq + count), positions [0, len).
  Tensor keys(std::int64_t layer, std::int64_t seq, std::int64_t count, std::int64_t len) const;
  Tensor values(std::int64_t layer, std::int64_t seq, std::int64_t count, std::int64_t len) const;

  // Refuses (invalid_argument) appending `steps` positions to sequences [seq, seq + count).
  void check_room(std::int64_t seq, std::int64_t count, std::int64_t steps) const;
  // Writes k, v [count, n_kv_heads, T, head_dim] (any floating dtype) into
  // layer `layer` at sequences [seq, seq + count), each at its own length; the
  // lengths do not move (advance does, once every layer is written).
  void write(std::int64_t layer, std::int64_t seq, const Tensor& k, const Tensor& v);
  // Adds `steps` to the lengths of sequences [seq, seq + count), after check_room.
  void advance(std::int64_t seq, std::int64_t count, std::int64_t steps);

 private:
  void check_layer(std::int64_t layer, const char* op) const;
  void check_seqs(std::int64_t seq, std::int64_t count, const char* op) const;

  std::int64_t n_layers_ = 0, batch_ = 0, n_kv_heads_ = 0, max_len_ = 0, head_dim_ = 0;
  DType dtype_ = DType::f32;
  std::size_t bytes_ = 0;
  std::vector<Tensor> k_, v_;  // per layer, owned memory
  std::vector<std::int64_t> lengths_;
};

}  // namespace forge::infer
