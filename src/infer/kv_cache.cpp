// KvCache: policy in include/forge/infer/kv_cache.h. The buffers are owned
// host memory (nn::detail::owned_empty), made once; every later access is a
// narrow view of them, and a step's new rows are copied into such a view.

#include "forge/infer/kv_cache.h"

#include <unistd.h>

#include <algorithm>
#include <limits>

#include "forge/autograd.h"
#include "forge/error.h"
#include "forge/infer/decoder.h"
#include "nn/owned.h"

namespace forge::infer {
namespace {

constexpr const char* kOp = "KvCache";

std::size_t physical_ram_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_bytes = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_bytes <= 0) return std::numeric_limits<std::size_t>::max();  // unknown: no bound
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_bytes);
}

}  // namespace

std::size_t KvCache::bytes_for(std::int64_t n_layers, std::int64_t batch, std::int64_t n_kv_heads, std::int64_t max_len,
                               std::int64_t head_dim, DType dtype) {
  // Saturating product: a hostile shape must not wrap to a small number.
  std::size_t bytes = 2 * dtype_size(dtype);
  for (const std::int64_t e : {n_layers, batch, n_kv_heads, max_len, head_dim}) {
    const auto u = static_cast<std::size_t>(e);
    if (u != 0 && bytes > std::numeric_limits<std::size_t>::max() / u) return std::numeric_limits<std::size_t>::max();
    bytes *= u;
  }
  return bytes;
}

KvCache::KvCache(ExecContext& ctx, const DecoderConfig& config, std::int64_t batch, std::int64_t max_len, DType dtype)
    : KvCache(ctx, (config.validate(), config.n_layers), batch, config.kv_heads(), max_len, config.head_dim(), dtype) {
  FORGE_CHECK(max_len <= config.max_seq_len, invalid_argument, kOp, "max_len ", max_len,
              " exceeds the model's max_seq_len ", config.max_seq_len);
}

KvCache::KvCache(ExecContext& ctx, std::int64_t n_layers, std::int64_t batch, std::int64_t n_kv_heads,
                 std::int64_t max_len, std::int64_t head_dim, DType dtype)
    : n_layers_(n_layers),
      batch_(batch),
      n_kv_heads_(n_kv_heads),
      max_len_(max_len),
      head_dim_(head_dim),
      dtype_(dtype) {
  FORGE_CHECK(n_layers > 0 && batch > 0 && n_kv_heads > 0 && max_len > 0 && head_dim > 0, invalid_argument, kOp,
              "n_layers ", n_layers, ", batch ", batch, ", n_kv_heads ", n_kv_heads, ", max_len ", max_len,
              " and head_dim ", head_dim, " must all be positive");
  FORGE_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16, dtype, kOp,
              "the cache holds f32, f16 or bf16, not ", dtype_name(dtype));
  FORGE_CHECK(ctx.device().is_cpu(), device, kOp, "the cache lives on the host, not ", ctx.device().str());
  bytes_ = bytes_for(n_layers, batch, n_kv_heads, max_len, head_dim, dtype);
  const std::size_t ram = physical_ram_bytes();
  FORGE_CHECK(bytes_ <= ram, out_of_memory, kOp, "a cache of ", n_layers, " layers x [", batch, ", ", n_kv_heads, ", ",
              max_len, ", ", head_dim, "] ", dtype_name(dtype), " keys and values needs ", bytes_,
              " bytes, more than the machine's ", ram, " bytes of RAM");
  const Shape shape{batch, n_kv_heads, max_len, head_dim};
  k_.reserve(static_cast<std::size_t>(n_layers));
  v_.reserve(static_cast<std::size_t>(n_layers));
  // Zeroed once: attention reads a batch's keys up to its longest sequence,
  // so a shorter one's masked rows are read too (weight 0), and 0 * NaN from
  // uninitialized memory would poison its output. Rows left from before a
  // reset hold finite values, which weight 0 cancels.
  for (std::int64_t l = 0; l < n_layers; ++l) {
    k_.push_back(nn::detail::owned_empty(ctx, shape, dtype, kOp));
    v_.push_back(nn::detail::owned_empty(ctx, shape, dtype, kOp));
    k_.back().zero_();
    v_.back().zero_();
  }
  lengths_.assign(static_cast<std::size_t>(batch), 0);
}

std::int64_t KvCache::length(std::int64_t seq) const {
  check_seqs(seq, 1, "KvCache.length");
  return lengths_[static_cast<std::size_t>(seq)];
}

std::int64_t KvCache::max_length() const noexcept { return *std::max_element(lengths_.begin(), lengths_.end()); }

void KvCache::reset() noexcept { std::fill(lengths_.begin(), lengths_.end(), 0); }

void KvCache::reset(std::int64_t seq) {
  check_seqs(seq, 1, "KvCache.reset");
  lengths_[static_cast<std::size_t>(seq)] = 0;
}

void KvCache::check_layer(std::int64_t layer, const char* op) const {
  FORGE_CHECK(layer >= 0 && layer < n_layers_, out_of_range, op, "layer ", layer, " is outside [0, ", n_layers_, ")");
}

void KvCache::check_seqs(std::int64_t seq, std::int64_t count, const char* op) const {
  FORGE_CHECK(seq >= 0 && count >= 0 && seq <= batch_ && count <= batch_ - seq, out_of_range, op, "sequences [", seq,
              ", ", seq, " + ", count, ") are outside the cache's batch of ", batch_);
}

const Tensor& KvCache::keys(std::int64_t layer) const {
  check_layer(layer, "KvCache.keys");
  return k_[static_cast<std::size_t>(layer)];
}

const Tensor& KvCache::values(std::int64_t layer) const {
  check_layer(layer, "KvCache.values");
  return v_[static_cast<std::size_t>(layer)];
}

Tensor KvCache::keys(std::int64_t layer, std::int64_t seq, std::int64_t count, std::int64_t len) const {
  check_seqs(seq, count, "KvCache.keys");
  return keys(layer).narrow(0, seq, count).narrow(2, 0, len);
}

Tensor KvCache::values(std::int64_t layer, std::int64_t seq, std::int64_t count, std::int64_t len) const {
  check_seqs(seq, count, "KvCache.values");
  return values(layer).narrow(0, seq, count).narrow(2, 0, len);
}

void KvCache::check_room(std::int64_t seq, std::int64_t count, std::int64_t steps) const {
  const char* op = "KvCache.append";
  check_seqs(seq, count, op);
  FORGE_CHECK(steps >= 0, invalid_argument, op, "cannot append ", steps, " positions");
  for (std::int64_t b = seq; b < seq + count; ++b) {
    const std::int64_t len = lengths_[static_cast<std::size_t>(b)];
    FORGE_CHECK(steps <= max_len_ - len, invalid_argument, op, "sequence ", b, " holds ", len, " of ", max_len_,
                " positions; ", steps, " more would overflow the cache");
  }
}

void KvCache::write(std::int64_t layer, std::int64_t seq, const Tensor& k, const Tensor& v) {
  const char* op = "KvCache.write";
  check_layer(layer, op);
  FORGE_CHECK(k.defined() && v.defined() && k.dim() == 4 && k.shape() == v.shape(), shape, op,
              "k and v must be [count, n_kv_heads, T, head_dim] of one shape");
  const std::int64_t count = k.size(0), steps = k.size(2);
  FORGE_CHECK(k.size(1) == n_kv_heads_ && k.size(3) == head_dim_, shape, op, "k of shape ", k.shape(),
              " does not fit a cache of ", n_kv_heads_, " kv heads of ", head_dim_);
  check_room(seq, count, steps);
  autograd::NoGradGuard no_grad;  // the cache keeps values, never a graph
  Tensor& kl = k_[static_cast<std::size_t>(layer)];
  Tensor& vl = v_[static_cast<std::size_t>(layer)];
  const auto first = lengths_.begin() + seq;
  if (std::all_of(first, first + count, [&](std::int64_t l) { return l == *first; })) {  // one copy each
    kl.narrow(0, seq, count).narrow(2, *first, steps).copy_(k.detach());
    vl.narrow(0, seq, count).narrow(2, *first, steps).copy_(v.detach());
    return;
  }
  for (std::int64_t b = 0; b < count; ++b) {
    const std::int64_t len = lengths_[static_cast<std::size_t>(seq + b)];
    kl.narrow(0, seq + b, 1).narrow(2, len, steps).copy_(k.detach().narrow(0, b, 1));
    vl.narrow(0, seq + b, 1).narrow(2, len, steps).copy_(v.detach().narrow(0, b, 1));
  }
}

void KvCache::advance(std::int64_t seq, std::int64_t count, std::int64_t steps) {
  check_room(seq, count, steps);
  for (std::int64_t b = seq; b < seq + count; ++b) lengths_[static_cast<std::size_t>(b)] += steps;
}

}  // namespace forge::infer
