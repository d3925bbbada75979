#pragma once
// Neural-network ops: normalizations, indexing, losses, convolution and
// pooling, dropout, attention, masks and padding. Floating inputs only unless
// said otherwise; index tensors are i64 (i32 also accepted). An index out of
// range is an out_of_range error naming the index and where it was. Every op
// has an `_into(out, ...)` form; `out` must have the result's shape and dtype
// exactly and may not overlap an input.

#include <array>
#include <cstdint>
#include <optional>

#include "forge/scalar.h"
#include "forge/tensor.h"

namespace forge {

// ---- normalizations (numerically careful: max subtracted, f32 accumulation) ----
Tensor softmax(const Tensor& x, std::int64_t dim);
Tensor log_softmax(const Tensor& x, std::int64_t dim);
// Normalizes over the trailing dims given by normalized_shape; weight and bias
// (of that shape) are optional (an undefined Tensor).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// x / sqrt(mean(x^2) + eps) * weight; eps defaults to the dtype's epsilon.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);

Tensor& softmax_into(Tensor& out, const Tensor& x, std::int64_t dim);
Tensor& log_softmax_into(Tensor& out, const Tensor& x, std::int64_t dim);
Tensor& layer_norm_into(Tensor& out, const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                        const Tensor& bias = Tensor(), double eps = 1e-5);
Tensor& rms_norm_into(Tensor& out, const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                      std::optional<double> eps = std::nullopt);

// ---- indexing ----
// The rows of weight [V, D] named by indices (any shape): [..., D]. Row
// padding_idx (in [-V, V); negative counts from the end) is looked up as any
// other but gets no gradient, as in libtorch.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<std::int64_t> padding_idx = std::nullopt);
// x's entries at index [n] along dim.
Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index);
// out[i][j][k] = x[index[i][j][k]][j][k] for dim 0, and so on; index has x's rank.
Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index);
// A copy of x with src added at index along dim: out[index[i][j]][j] += src[i][j] for dim 0.
Tensor scatter_add(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src);
// i64 [..., num_classes]; num_classes -1 means max(indices) + 1.
Tensor one_hot(const Tensor& indices, std::int64_t num_classes = -1);

Tensor& embedding_into(Tensor& out, const Tensor& weight, const Tensor& indices);
Tensor& index_select_into(Tensor& out, const Tensor& x, std::int64_t dim, const Tensor& index);
Tensor& gather_into(Tensor& out, const Tensor& x, std::int64_t dim, const Tensor& index);
Tensor& scatter_add_into(Tensor& out, const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src);
Tensor& one_hot_into(Tensor& out, const Tensor& indices, std::int64_t num_classes = -1);

// ---- losses ----
enum class Reduction { none, mean, sum };
struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  std::int64_t ignore_index = -100;  // targets equal to it add nothing and do not count in the mean
  double label_smoothing = 0.0;      // in [0, 1]
};
// logits [N, C], [C] or [N, C, d1, ..., dk] with class-index targets [N], []
// or [N, d1, ..., dk]: the classes are dim 1, as in libtorch (a transformer's
// [B, T, V] logits go in as logits.transpose(1, 2), a view). reduction none
// gives the targets' shape; mean averages over the counted targets.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// log_probs [N, C], [C] or [N, C, d1, ..., dk] with class-index targets as
// cross_entropy's.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::mean,
                std::int64_t ignore_index = -100);
// (a - b)^2; a and b broadcast.
Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::mean);

Tensor& cross_entropy_into(Tensor& out, const Tensor& logits, const Tensor& target,
                           const CrossEntropyOptions& options = {});
Tensor& nll_loss_into(Tensor& out, const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::mean,
                      std::int64_t ignore_index = -100);
Tensor& mse_loss_into(Tensor& out, const Tensor& a, const Tensor& b, Reduction reduction = Reduction::mean);

// ---- convolution and pooling (NCHW) ----
struct Conv2dOptions {
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::int64_t, 2> padding{0, 0};
  std::array<std::int64_t, 2> dilation{1, 1};
  std::int64_t groups = 1;
};
// x [N, C, H, W], weight [O, C / groups, kH, kW], bias [O] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& options = {});
Tensor& conv2d_into(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                    const Conv2dOptions& options = {});

struct Pool2dOptions {
  std::array<std::int64_t, 2> kernel{2, 2};
  std::array<std::int64_t, 2> stride{0, 0};  // 0 means the kernel size
  std::array<std::int64_t, 2> padding{0, 0};
  std::array<std::int64_t, 2> dilation{1, 1};  // max_pool2d only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options = {});
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options = {});
Tensor& max_pool2d_into(Tensor& out, const Tensor& x, const Pool2dOptions& options = {});
Tensor& avg_pool2d_into(Tensor& out, const Tensor& x, const Pool2dOptions& options = {});

// ---- dropout and attention ----
// Zeroes each element with probability p and scales the rest by 1 / (1 - p),
// drawing from the context's seeded generator; x itself when !training or p == 0.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);
Tensor& dropout_into(Tensor& out, const Tensor& x, double p = 0.5, bool training = true);
// Where is_causal puts the diagonal when there are fewer queries than keys.
// top_left: query i sees keys j <= i (libtorch's is_causal). bottom_right:
// query i sees keys j <= i + S - L, the queries being the last L of the S
// positions, as a decode step over a KV cache needs (libtorch 2's
// causal_lower_right). The two agree when L == S.
enum class CausalAlign : std::uint8_t { top_left, bottom_right };
// softmax(q k^T * scale + mask) v over q [..., L, E], k [..., S, E], v [..., S, Ev].
// attn_mask (optional) is bool (true keeps) or float (added), broadcasting to
// [..., L, S]; is_causal masks the keys after each query, aligned by `align`;
// scale defaults to 1 / sqrt(E). A row whose keys are all masked is NaN.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    CausalAlign align = CausalAlign::top_left);
Tensor& scaled_dot_product_attention_into(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& attn_mask = Tensor(), bool is_causal = false,
                                          std::optional<double> scale = std::nullopt,
                                          CausalAlign align = CausalAlign::top_left);

// ---- masks and padding ----
// The upper/lower triangle of the last two dims (j - i >= diagonal / j - i <= diagonal); any dtype.
Tensor triu(const Tensor& x, std::int64_t diagonal = 0);
Tensor tril(const Tensor& x, std::int64_t diagonal = 0);
Tensor& triu_into(Tensor& out, const Tensor& x, std::int64_t diagonal = 0);
Tensor& tril_into(Tensor& out, const Tensor& x, std::int64_t diagonal = 0);

enum class PadMode { constant, reflect, replicate };
// pad lists (before, after) pairs starting from the last dim, as in libtorch's
// F::pad; negative amounts crop (constant mode). Any dtype in constant mode;
// the fill value must fit it (out_of_range otherwise, as for full).
Tensor pad(const Tensor& x, const Dims& pad, PadMode mode = PadMode::constant, Scalar value = 0.0);
Tensor& pad_into(Tensor& out, const Tensor& x, const Dims& pad, PadMode mode = PadMode::constant, Scalar value = 0.0);

}  // namespace forge
