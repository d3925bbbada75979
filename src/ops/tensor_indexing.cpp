// Tensor::index and Tensor::index_put_ (forge/ops/indexing.h), libtorch's
// indexing built from existing ops:
// - The index list is walked left to right into a view of self (select,
//   slice, unsqueeze: recorded like any view) and a list of advanced indices
//   (integer tensors, masks as the coordinates of their true entries, bool
//   scalars), read to the host, checked and wrapped there. Reading them makes
//   an advanced index a sync point on a device.
// - Advanced indices are one index_select over the indexed dims moved to the
//   front and flattened ("the block"), so the copy and its gradient
//   (scatter_add) are index_select's; a single index (or mask over one dim)
//   runs index_select along its own dim, reading the view in place. The
//   broadcast dims of the indices take the place of the first indexed dim
//   when the indexed dims are adjacent, else they lead (libtorch's rule).
// - index_put_ writes through the same view. Its advanced form finds, on the
//   host, the value row each row of the block receives (the last one listed
//   when an index repeats, as libtorch's CPU loop does) and writes the whole
//   block back once with where(): O(block), not O(indices).
// - Under autograd index_put_ is recorded in place (the written tensor takes
//   a node whose inputs are its previous history and the values), under the
//   restrictions of Note [In-place writes under autograd].

#include <algorithm>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/record.h"
#include "core/tensor_internal.h"
#include "forge/ops.h"

namespace forge {
namespace {

using indexing::Slice;
using indexing::TensorIndex;
using indexing::TensorIndexType;

// An advanced index along dim `dim` of the view; values wrapped into [0, size).
struct Advanced {
  int dim;
  Shape shape;
  std::vector<std::int64_t> values;
};

struct Plan {
  Tensor view;
  std::vector<Advanced> advanced;
};

bool is_mask(const Tensor& t) { return t.dtype() == DType::boolean; }

// How many dims of self an entry consumes.
int consumed(const TensorIndex& i) {
  if (i.is_integer() || i.is_slice()) return 1;
  if (i.is_tensor()) return is_mask(i.tensor()) ? i.tensor().dim() : 1;
  return 0;
}

std::int64_t wrapped(const char* op, std::int64_t i, int dim, std::int64_t size) {
  FORGE_CHECK(i >= -size && i < size, out_of_range, op, "index ", i, " is out of bounds for dimension ", dim,
              " with size ", size);
  return i < 0 ? i + size : i;
}

Tensor sliced(const char* op, const Tensor& v, int dim, const Slice& s) {
  const std::int64_t step = s.step().value_or(1);
  FORGE_CHECK(step > 0, invalid_argument, op, "slice step must be greater than zero, got ", step);
  return v.slice(dim, s.start().value_or(0), s.stop().value_or(std::numeric_limits<std::int64_t>::max()), step);
}

// true: a new dim of size 1 indexed by [0]; false: by [] (libtorch's boolToIndexingTensor).
Advanced bool_index(int dim, bool b) {
  return {dim, Shape{b ? 1 : 0}, b ? std::vector<std::int64_t>{0} : std::vector<std::int64_t>{}};
}

Advanced integer_index(const char* op, const Tensor& t, int dim, int real_dim, std::int64_t size) {
  Advanced a{dim, t.shape(), t.to_vector<std::int64_t>()};
  for (std::int64_t& v : a.values) v = wrapped(op, v, real_dim, size);
  return a;
}

// A mask over view dims [dim, dim + rank): one advanced index per dim, holding
// that coordinate of each true entry in row-major order (libtorch's nonzero).
void mask_indices(const char* op, const Tensor& mask, const Tensor& view, int dim, int real_dim,
                  std::vector<Advanced>& out) {
  const int k = mask.dim();
  for (int j = 0; j < k; ++j) {
    FORGE_CHECK(mask.size(j) == view.size(dim + j), shape, op, "the shape of the mask ", mask.shape(), " at index ", j,
                " does not match the shape of the indexed tensor ", view.shape(), " at index ", real_dim + j);
  }
  const std::vector<bool> flags = mask.to_vector<bool>();
  std::vector<std::vector<std::int64_t>> coords(static_cast<std::size_t>(k));
  std::int64_t pos[kMaxRank] = {};
  for (const bool set : flags) {
    if (set)
      for (int j = 0; j < k; ++j) coords[static_cast<std::size_t>(j)].push_back(pos[j]);
    for (int j = k - 1; j >= 0 && ++pos[j] == mask.size(j); --j) pos[j] = 0;
  }
  const auto count = static_cast<std::int64_t>(coords[0].size());
  for (int j = 0; j < k; ++j) out.push_back({dim + j, Shape{count}, std::move(coords[static_cast<std::size_t>(j)])});
}

void check_index_tensor(const char* op, const Tensor& self, const Tensor& t) {
  detail::check_input(op, t, "index");
  detail::check_same_runtime(op, self, t);
  FORGE_CHECK(t.dtype() == DType::boolean || t.dtype() == DType::i64 || t.dtype() == DType::i32, dtype, op,
              "tensors used as indices must be long, int or bool tensors, got ", dtype_name(t.dtype()));
}

Plan plan_of(const char* op, const Tensor& self, const std::vector<TensorIndex>& indices) {
  detail::check_input(op, self, "self");
  int specified = 0, ellipses = 0;
  for (const TensorIndex& i : indices) {
    if (i.is_tensor()) check_index_tensor(op, self, i.tensor());
    specified += consumed(i);
    ellipses += i.is_ellipsis() ? 1 : 0;
  }
  FORGE_CHECK(ellipses <= 1, invalid_argument, op, "an index can only have a single ellipsis ('...'), got ", ellipses);
  FORGE_CHECK(specified <= self.dim(), out_of_range, op, "too many indices for tensor of dimension ", self.dim(),
              " (got ", specified, ")");
  Plan p{self, {}};
  int dim = 0, real = 0;  // the next dim of the view, and of self
  for (const TensorIndex& i : indices) {
    switch (i.type()) {
      case TensorIndexType::integer:
        p.view = p.view.select(dim, wrapped(op, i.integer(), real++, p.view.size(dim)));
        break;
      case TensorIndexType::slice:
        p.view = sliced(op, p.view, dim++, i.slice());
        ++real;
        break;
      case TensorIndexType::none:
        p.view = p.view.unsqueeze(dim++);
        break;
      case TensorIndexType::ellipsis:
        dim += self.dim() - specified;
        real += self.dim() - specified;
        break;
      case TensorIndexType::boolean:
        p.view = p.view.unsqueeze(dim);
        p.advanced.push_back(bool_index(dim++, i.boolean()));
        break;
      case TensorIndexType::tensor: {
        const Tensor& t = i.tensor();
        if (t.dim() == 0 && is_mask(t)) {  // a 0-d bool tensor is a bool scalar
          p.view = p.view.unsqueeze(dim);
          p.advanced.push_back(bool_index(dim++, t.item<bool>()));
        } else if (t.dim() == 0) {  // a 0-d integer tensor is an integer (a view), as in libtorch
          p.view = p.view.select(dim, wrapped(op, t.item<std::int64_t>(), real++, p.view.size(dim)));
        } else if (is_mask(t)) {
          mask_indices(op, t, p.view, dim, real, p.advanced);
          dim += t.dim();
          real += t.dim();
        } else {
          p.advanced.push_back(integer_index(op, t, dim, real++, p.view.size(dim)));
          ++dim;
        }
        break;
      }
    }
  }
  return p;
}

// The advanced indices' view of the block: the indexed dims moved to the
// front (perm) and flattened into `rows` rows; lin[q] is the row that
// position q of the indices' broadcast shape picks.
struct Block {
  Dims perm;
  Shape broadcast;
  Shape rest;  // the view's other dims, in order
  std::int64_t rows = 1;
  std::vector<std::int64_t> lin;
  int at = 0;  // where the broadcast dims go in the result
};

Block block_of(const char* op, const Plan& p) {
  Block b;
  for (const Advanced& a : p.advanced) b.broadcast = broadcast_shapes(b.broadcast, a.shape, op);
  const int r = b.broadcast.rank(), n = static_cast<int>(p.advanced.size());
  bool adjacent = true;
  std::vector<Strides> strides;  // each index's strides over the broadcast shape (0 where it broadcasts)
  std::vector<std::int64_t> scale(static_cast<std::size_t>(n));
  for (int k = n - 1; k >= 0; --k) {
    const Advanced& a = p.advanced[static_cast<std::size_t>(k)];
    scale[static_cast<std::size_t>(k)] = b.rows;
    b.rows *= p.view.size(a.dim);
  }
  for (int k = 0; k < n; ++k) {
    const Advanced& a = p.advanced[static_cast<std::size_t>(k)];
    b.perm.push_back(a.dim);
    adjacent = adjacent && a.dim == p.advanced[0].dim + k;
    Strides s = Strides::filled(r, 0);
    const Strides c = contiguous_strides(a.shape);
    for (int d = 0; d < a.shape.rank(); ++d)
      if (a.shape[d] != 1) s[d + r - a.shape.rank()] = c[d];
    strides.push_back(s);
  }
  for (int d = 0; d < p.view.dim(); ++d) {
    if (std::none_of(p.advanced.begin(), p.advanced.end(), [d](const Advanced& a) { return a.dim == d; })) {
      b.perm.push_back(d);
      b.rest.push_back(p.view.size(d));
    }
  }
  b.at = adjacent ? p.advanced[0].dim : 0;
  b.lin.resize(static_cast<std::size_t>(b.broadcast.numel()));
  std::int64_t pos[kMaxRank] = {};
  for (std::int64_t& row : b.lin) {
    row = 0;
    for (int k = 0; k < n; ++k) {
      std::int64_t off = 0;
      for (int d = 0; d < r; ++d) off += pos[d] * strides[static_cast<std::size_t>(k)][d];
      row += p.advanced[static_cast<std::size_t>(k)].values[static_cast<std::size_t>(off)] *
             scale[static_cast<std::size_t>(k)];
    }
    for (int d = r - 1; d >= 0 && ++pos[d] == b.broadcast[d]; --d) pos[d] = 0;
  }
  return b;
}

// The result's shape: rest with the broadcast dims inserted at `at`.
Shape result_shape(const Block& b) {
  Shape s;
  for (int d = 0; d < b.at; ++d) s.push_back(b.rest[d]);
  for (const std::int64_t e : b.broadcast) s.push_back(e);
  for (int d = b.at; d < b.rest.rank(); ++d) s.push_back(b.rest[d]);
  return s;
}

// The permutation from [broadcast..., rest...] to the result's order, and its inverse.
Dims to_result(const Block& b) {
  const int nb = b.broadcast.rank();
  Dims perm;
  for (int d = 0; d < b.at; ++d) perm.push_back(nb + d);
  for (int d = 0; d < nb; ++d) perm.push_back(d);
  for (int d = nb + b.at; d < nb + b.rest.rank(); ++d) perm.push_back(d);
  return perm;
}
Dims from_result(const Block& b) {
  const Dims perm = to_result(b);
  Dims inverse = Dims::filled(perm.rank(), 0);
  for (int i = 0; i < perm.rank(); ++i) inverse[static_cast<int>(perm[i])] = i;
  return inverse;
}

Shape rows_shape(const Block& b) {
  Shape s{b.rows};
  for (const std::int64_t e : b.rest) s.push_back(e);
  return s;
}

// A tensor of `dtype` in like's context holding `values` (host bytes of that dtype).
template <typename T>
Tensor host_values(const Tensor& like, const std::vector<T>& values, DType dtype) {
  Tensor t = detail::allocate(like.runtime(), Shape{static_cast<std::int64_t>(values.size())}, dtype, "index");
  if (!values.empty()) {
    detail::device_runtime(t).upload(detail::first_element(t), reinterpret_cast<const std::byte*>(values.data()),
                                     values.size() * sizeof(T));
  }
  return t;
}

Tensor gather_block(const Plan& p, const Block& b) {
  if (p.advanced.size() == 1) {  // one index: index_select reads the view in place along its dim
    const Tensor index = host_values(p.view, b.lin, DType::i64);
    return index_select(p.view, p.advanced[0].dim, index).reshape(result_shape(b));
  }
  const Tensor rows = p.view.permute(b.perm).reshape(rows_shape(b));
  Shape taken_shape = b.broadcast;
  for (const std::int64_t e : b.rest) taken_shape.push_back(e);
  const Tensor taken = index_select(rows, 0, host_values(rows, b.lin, DType::i64)).reshape(taken_shape);
  return b.at == 0 ? taken : taken.permute(to_result(b)).contiguous();
}

// values with their leading 1s dropped (numpy's rule, as libtorch's set_item), broadcast to `shape`.
Tensor fitted(const char* op, const Tensor& values, const Shape& shape) {
  Shape s = values.shape();
  while (s.rank() > 0 && s[0] == 1) s.erase(0);
  bool fits = s.rank() <= shape.rank();
  for (int d = 0; fits && d < s.rank(); ++d) fits = s[d] == 1 || s[d] == shape[d + shape.rank() - s.rank()];
  FORGE_CHECK(fits, shape, op, "shape mismatch: value tensor of shape ", values.shape(),
              " cannot be broadcast to indexing result of shape ", shape);
  return values.reshape(s).broadcast_to(shape);
}

// Writes values (self's dtype) through the plan; grad mode is off.
void write(const char* op, const Plan& p, const Tensor& values) {
  if (p.advanced.empty()) {
    Tensor target = p.view;
    target.copy_(fitted(op, values, target.shape()));
    return;
  }
  const Block b = block_of(op, p);
  if (b.lin.empty()) return;
  const Tensor given = fitted(op, values, result_shape(b)).permute(from_result(b));
  Shape given_rows{static_cast<std::int64_t>(b.lin.size())};
  for (const std::int64_t e : b.rest) given_rows.push_back(e);
  // For each row of the block: whether it is written, and from which value row.
  std::vector<std::int64_t> source(static_cast<std::size_t>(b.rows), -1);
  for (std::size_t q = 0; q < b.lin.size(); ++q)
    source[static_cast<std::size_t>(b.lin[q])] = static_cast<std::int64_t>(q);
  std::vector<std::uint8_t> written(source.size());
  for (std::size_t r = 0; r < source.size(); ++r) {
    written[r] = source[r] >= 0 ? 1 : 0;
    source[r] = std::max<std::int64_t>(source[r], 0);
  }
  Tensor front = p.view.permute(b.perm);
  const Tensor incoming = index_select(given.reshape(given_rows), 0, host_values(front, source, DType::i64));
  Shape flag_shape = Shape::filled(b.rest.rank() + 1, 1);
  flag_shape[0] = b.rows;
  const Tensor flags = host_values(front, written, DType::boolean).reshape(flag_shape);
  front.copy_(where(flags, incoming, front.reshape(rows_shape(b))).reshape(front.shape()));
}

// The gradient of index_put_: g with the written elements zeroed for self, g
// read at them for values (summed over what the values broadcast over).
void record_put(const Tensor& self, std::vector<TensorIndex> indices, const Tensor& values) {
  for (TensorIndex& i : indices)  // later writes to an index tensor must not change the gradient
    if (i.is_tensor()) i = TensorIndex(i.tensor().clone());
  autograd::record(self, "index_put_", autograd::inputs(self, values), autograd::saves(),
                   [indices = std::move(indices)](autograd::Vjp& v) {
                     if (v.needs(0)) {
                       Tensor g = v.grad().clone();
                       g.index_put_(indices, 0);
                       v.set(0, g);
                     }
                     if (v.needs(1)) {
                       const Shape& vs = v.input_shape(1);
                       Shape s = vs;
                       while (s.rank() > 0 && s[0] == 1) s.erase(0);
                       v.set(1, autograd::sum_to(v.grad().index(indices), s).reshape(vs));
                     }
                   });
}

Tensor& put(Tensor& self, const std::vector<TensorIndex>& indices, const Tensor& values) {
  const char* op = "index_put_";
  detail::check_writable(op, self, "self");
  detail::check_input(op, values, "values");
  detail::check_same_runtime(op, self, values);
  const bool recorded = autograd::needs_grad(self, values);
  if (recorded) {
    FORGE_CHECK(!(self.requires_grad() && self.is_leaf()), backward, op,
                "a leaf tensor that requires grad cannot be written in place while grad mode is on; "
                "wrap the update in NoGradGuard");
    FORGE_CHECK(!self.impl()->is_view(), not_implemented, op,
                "writing in place into a view while autograd records is not supported; compute out of place");
  }
  {
    autograd::NoGradGuard no_grad;
    write(op, plan_of(op, self, indices), values.to(self.dtype()));
  }
  if (recorded) record_put(self, indices, values);
  return self;
}

}  // namespace

namespace indexing {

TensorIndex::TensorIndex(const char* ellipsis) : type_(TensorIndexType::ellipsis) {
  FORGE_CHECK(ellipsis != nullptr && std::string_view(ellipsis) == "...", invalid_argument, "TensorIndex",
              "the only string index is \"...\", got \"", ellipsis ? ellipsis : "(null)", "\"");
}

}  // namespace indexing

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const try {
  const Plan p = plan_of("index", *this, indices);
  if (!p.advanced.empty()) return gather_block(p, block_of("index", p));
  return p.view.is_same(*this) ? clone_view() : p.view;
}
FORGE_CATCH_OOM("index")

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  return index(std::vector<TensorIndex>(indices));
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& values) try {
  return put(*this, indices, values);
}
FORGE_CATCH_OOM("index_put_")

Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, const Tensor& values) {
  return index_put_(std::vector<TensorIndex>(indices), values);
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, Scalar value) try {
  detail::check_input("index_put_", *this, "self");
  Tensor values = detail::allocate(runtime(), Shape{}, dtype(), "index_put_");
  values.fill_(value);
  return put(*this, indices, values);
}
FORGE_CATCH_OOM("index_put_")

Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, Scalar value) {
  return index_put_(std::vector<TensorIndex>(indices), value);
}

}  // namespace forge
