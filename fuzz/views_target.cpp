// fuzz_views: the input decodes into a buffer of one dtype (caller-owned heap
// memory, so ASan sees any read outside it), a starting view, and up to
// kMaxOps view ops with arguments from the input, in range or wildly out of
// it. Beside the tensor runs a model that knows nothing of strides: the
// shape and, in C order, the index into the base buffer of every element.
// Each op is applied to both; the model predicts whether forge must accept
// it, and forge must agree (for view, which may refuse a layout it cannot
// express without a copy, an accepted call must match). At the end the
// result is read whole, directly and through contiguous(), and each element
// must be the base element the model names.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support.h"

namespace forge_fuzz {
namespace {

using forge::Dims;
using forge::DType;
using forge::Shape;
using forge::Strides;
using forge::Tensor;
using i64 = std::int64_t;
__extension__ typedef __int128 i128;  // exact spans and products, past int64

constexpr int kMaxOps = 16;
constexpr i64 kMaxElements = 4096;  // a model result larger than this is skipped: time, not coverage
constexpr i64 kMaxBase = 512;       // elements in the base buffer

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16,     DType::bf16, DType::i32,
                             DType::i64, DType::u8,  DType::boolean, DType::i8};

// Values every dtype holds exactly, so the base reads back as written.
i64 period(DType dtype) {
  switch (dtype) {
    case DType::boolean:
      return 2;
    case DType::u8:
      return 251;
    case DType::i8:
      return 127;
    case DType::bf16:
      return 256;
    case DType::f16:
      return 2048;
    default:
      return std::numeric_limits<i64>::max();
  }
}

// The input, read front to back; zeros once it runs out.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool done() const noexcept { return pos_ >= size_; }
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }

  // Mostly small signed values around the interesting range, sometimes an
  // extreme one (overflow, sign and wrap checks).
  i64 number(i64 lo, i64 hi) {
    const std::uint8_t b = byte();
    if (b < 232) return lo + b % (hi - lo + 1);
    constexpr i64 kMax = std::numeric_limits<i64>::max(), kMin = std::numeric_limits<i64>::min();
    constexpr i64 kWild[] = {kMax,
                             kMin,
                             kMax / 2,
                             kMin / 2,
                             i64{1} << 32,
                             -(i64{1} << 32),
                             i64{1} << 62,
                             -(i64{1} << 62),
                             kMax - 1,
                             kMin + 1,
                             1 << 20,
                             -(1 << 20),
                             4097,
                             -4097,
                             kMax / 3,
                             -1,
                             0,
                             1,
                             2,
                             3,
                             9,
                             -9,
                             64,
                             -64};
    return kWild[(b - 232) % std::size(kWild)];
  }
  i64 dim(int rank) { return number(-rank - 1, rank + 1); }
  i64 extent() { return number(0, 4); }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// A shape's element count, or nullopt when it is out of the model's range.
std::optional<i64> small_numel(const Shape& shape) {
  i128 n = 1;
  for (i64 e : shape) {
    if (e < 0) return std::nullopt;
    n *= e;
    if (n > kMaxElements) return std::nullopt;
  }
  return static_cast<i64>(n);
}

// forge's rule for any shape it makes: non-negative extents whose product,
// with zeros counted as ones, fits in int64.
bool extents_ok(const Shape& shape) {
  i128 span = 1;
  for (i64 e : shape) {
    if (e < 0) return false;
    span *= std::max<i64>(e, 1);
    if (span > std::numeric_limits<i64>::max()) return false;
  }
  return true;
}

std::optional<int> wrap(i64 dim, int rank) {
  const i64 lo = rank == 0 ? -1 : -rank, hi = rank == 0 ? 0 : rank - 1;
  if (dim < lo || dim > hi) return std::nullopt;
  return static_cast<int>(dim < 0 ? dim + (rank == 0 ? 1 : rank) : dim);
}

// The model: which base element each element of the tensor is.
struct Model {
  Shape shape;
  std::vector<i64> index;                           // C order, into base
  std::shared_ptr<const std::vector<double>> base;  // NaN: bytes nobody wrote
  i64 capacity = 0;                                 // elements in the tensor's buffer

  // A model of shape `out` whose element at coordinate c is this one's at source(c).
  template <typename Source>
  Model gather(const Shape& out, Source&& source) const {
    Model m{out, {}, base, capacity};
    const i64 n = out.numel();
    m.index.reserve(static_cast<std::size_t>(n));
    Dims c = Dims::filled(out.rank(), 0), in = Dims::filled(shape.rank(), 0);
    for (i64 k = 0; k < n; ++k) {
      source(c, in);
      i64 linear = 0;
      for (int d = 0; d < shape.rank(); ++d) linear = linear * shape[d] + in[d];
      m.index.push_back(index[static_cast<std::size_t>(linear)]);
      for (int d = out.rank() - 1; d >= 0 && ++c[d] == out[d]; --d) c[d] = 0;
    }
    return m;
  }
  Model reshaped(const Shape& out) const { return Model{out, index, base, capacity}; }
};

// The model's prediction for one op: the result, or nullopt when forge must refuse.
struct Step {
  std::optional<Model> model;
  bool may_refuse = false;  // a refusal that depends on strides, which the model does not keep
  bool may_copy = false;    // reshape, flatten: a fresh buffer when no view fits
  bool skip = false;        // valid but too large to check: not run
};

Step refuse() { return Step{}; }

// What a view op may refuse with.
bool ok_code(forge::ErrorCode code) {
  using forge::ErrorCode;
  return code == ErrorCode::invalid_argument || code == ErrorCode::out_of_range || code == ErrorCode::shape;
}
Step accept(Model m) { return Step{std::move(m)}; }

void check_values(const Model& m, const Tensor& t) {
  require(t.shape() == m.shape, "the result's shape is not the model's");
  for (const Tensor& read : {t, t.contiguous()}) {
    const std::vector<double> values = read.to_vector<double>();
    require(values.size() == m.index.size(), "the result has the wrong number of elements");
    for (std::size_t k = 0; k < values.size(); ++k) {
      const double expected = (*m.base)[static_cast<std::size_t>(m.index[k])];
      if (!std::isnan(expected)) require(values[k] == expected, "an element is not the base element the model names");
    }
  }
}

// The values the model sees in a tensor forge copied (reshape of a layout
// view cannot express): its own buffer, packed, then bytes nobody wrote.
Model rebase(const Model& m, const Tensor& copy) {
  auto base = std::make_shared<std::vector<double>>();
  const i64 capacity = static_cast<i64>(copy.buffer()->nbytes() / copy.element_size());
  base->assign(static_cast<std::size_t>(capacity), std::nan(""));
  for (std::size_t k = 0; k < m.index.size(); ++k)
    (*base)[static_cast<std::size_t>(copy.offset()) + k] = (*m.base)[static_cast<std::size_t>(m.index[k])];
  Model out{m.shape, {}, base, capacity};
  for (std::size_t k = 0; k < m.index.size(); ++k) out.index.push_back(copy.offset() + static_cast<i64>(k));
  return out;
}

// ---- the ops: each decodes its arguments, predicts, and calls forge ----

std::optional<Model> predict_as_strided(const Model& m, const Shape& shape, const Strides& strides, i64 offset) {
  if (shape.rank() != strides.rank() || offset < 0 || !extents_ok(shape)) return std::nullopt;
  const i64 n = shape.numel();
  if (n > 0) {
    i128 lo = offset, hi = offset;
    for (int d = 0; d < shape.rank(); ++d) {
      const i128 span = static_cast<i128>(shape[d] - 1) * strides[d];
      (span < 0 ? lo : hi) += span;
    }
    if (lo < 0 || hi >= m.capacity) return std::nullopt;
  }
  Model r{shape, {}, m.base, m.capacity};
  Dims c = Dims::filled(shape.rank(), 0);
  for (i64 k = 0; k < n; ++k) {
    i64 at = offset;
    for (int d = 0; d < shape.rank(); ++d) at += c[d] * strides[d];
    r.index.push_back(at);
    for (int d = shape.rank() - 1; d >= 0 && ++c[d] == shape[d]; --d) c[d] = 0;
  }
  return r;
}

// The element count rules view and reshape share: one -1 inferred, the rest
// non-negative, the product equal to numel.
std::optional<Shape> infer(const Shape& requested, i64 numel) {
  Shape shape = requested;
  int infer_at = -1;
  i128 known = 1;
  bool known_overflow = false;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == -1) {
      if (infer_at >= 0) return std::nullopt;
      infer_at = d;
    } else if (shape[d] < 0) {
      return std::nullopt;
    } else if (!known_overflow) {
      known *= shape[d];
      known_overflow = known > std::numeric_limits<i64>::max();  // forge refuses at the overflow
    }
  }
  if (known_overflow) return std::nullopt;
  if (infer_at >= 0) {
    if (known == 0 || numel % static_cast<i64>(known) != 0) return std::nullopt;
    shape[infer_at] = numel / static_cast<i64>(known);
  } else if (known != numel) {
    return std::nullopt;
  }
  if (!extents_ok(shape)) return std::nullopt;
  return shape;
}

Shape random_shape(Input& in, const Model& m) {
  Shape shape;
  const int rank = in.byte() % (forge::kMaxRank + 1);
  // Mostly the factors of numel in some order, so that a view is possible.
  for (int d = 0; d < rank; ++d) shape.push_back(in.byte() < 40 ? -1 : in.number(0, 6));
  if (in.byte() % 2 == 0 && rank > 0) {
    i64 rest = static_cast<i64>(m.index.size());
    for (int d = 0; d < rank - 1; ++d) {
      const i64 e = shape[d];
      if (e > 0 && rest % e == 0) rest /= e;
    }
    shape[rank - 1] = rest;
  }
  return shape;
}

// Decodes one op: sets `call` to it and returns the model's prediction.
Step step(Input& in, const Model& m, const Tensor& t, std::function<Tensor()>& call) {
  const int rank = m.shape.rank();
  switch (in.byte() % 13) {
    case 0: {  // narrow
      const i64 dim = in.dim(rank), start = in.number(-5, 5), length = in.number(-1, 5);
      call = [=] { return t.narrow(dim, start, length); };
      const auto d = rank > 0 ? wrap(dim, rank) : std::nullopt;
      if (!d) return refuse();
      const i64 size = m.shape[*d];
      i64 s = start < 0 && start >= -size ? start + size : start;
      if (s < 0 || s > size || length < 0 || length > size - s) return refuse();
      Shape shape = m.shape;
      shape[*d] = length;
      return accept(m.gather(shape, [&](const Dims& c, Dims& src) {
        src = c;
        src[*d] = c[*d] + s;
      }));
    }
    case 1: {  // slice with a step
      const i64 dim = in.dim(rank), start = in.number(-6, 6), end = in.number(-6, 6), stride = in.number(-1, 4);
      call = [=] { return t.slice(dim, start, end, stride); };
      const auto d = rank > 0 ? wrap(dim, rank) : std::nullopt;
      if (!d || stride <= 0) return refuse();
      const i64 size = m.shape[*d];
      i64 s = start < 0 ? start + size : start, e = end < 0 ? end + size : end;
      s = std::clamp<i64>(s, 0, size);
      e = std::clamp<i64>(e, s, size);
      Shape shape = m.shape;
      shape[*d] = e > s ? (e - s - 1) / stride + 1 : 0;
      Step r = accept(m.gather(shape, [&](const Dims& c, Dims& src) {
        src = c;
        src[*d] = s + c[*d] * stride;
      }));
      // An empty tensor's strides are unchecked, so step times stride may overflow.
      r.may_refuse = m.index.empty();
      return r;
    }
    case 2: {  // select
      const i64 dim = in.dim(rank), index = in.number(-5, 5);
      call = [=] { return t.select(dim, index); };
      const auto d = rank > 0 ? wrap(dim, rank) : std::nullopt;
      if (!d) return refuse();
      const i64 size = m.shape[*d];
      if (index < -size || index >= size) return refuse();
      Shape shape = m.shape;
      shape.erase(*d);
      return accept(m.gather(shape, [&](const Dims& c, Dims& src) {
        for (int k = 0, j = 0; k < rank; ++k) src[k] = k == *d ? (index < 0 ? index + size : index) : c[j++];
      }));
    }
    case 3: {  // permute: a shuffle, sometimes damaged or written with negative dims
      Dims dims;
      for (int d = 0; d < rank; ++d) dims.push_back(d);
      for (int d = rank - 1; d > 0; --d) std::swap(dims[d], dims[in.byte() % (d + 1)]);
      const std::uint8_t damage = in.byte();
      if (damage < 64 && rank > 0)
        dims[damage % rank] = in.dim(rank);
      else if (damage < 80 && rank < forge::kMaxRank)
        dims.push_back(in.dim(rank));
      else if (damage < 96 && rank > 0)
        dims.erase(0);
      call = [=] { return t.permute(dims); };
      if (dims.rank() != rank) return refuse();
      Dims wrapped;
      bool seen[forge::kMaxRank] = {};
      for (i64 x : dims) {
        const auto d = wrap(x, rank);
        if (!d || seen[*d]) return refuse();
        seen[*d] = true;
        wrapped.push_back(*d);
      }
      Shape shape = m.shape;
      for (int i = 0; i < rank; ++i) shape[i] = m.shape[static_cast<int>(wrapped[i])];
      return accept(m.gather(shape, [&](const Dims& c, Dims& src) {
        for (int i = 0; i < rank; ++i) src[static_cast<int>(wrapped[i])] = c[i];
      }));
    }
    case 4: {  // transpose
      const i64 a = in.dim(rank), b = in.dim(rank);
      call = [=] { return t.transpose(a, b); };
      const auto da = wrap(a, rank), db = wrap(b, rank);
      if (!da || !db) return refuse();
      if (rank == 0) return accept(m);
      Shape shape = m.shape;
      std::swap(shape[*da], shape[*db]);
      return accept(m.gather(shape, [&](const Dims& c, Dims& src) {
        src = c;
        std::swap(src[*da], src[*db]);
      }));
    }
    case 5: {  // expand: -1 keeps a dimension, a size-1 one may grow, new ones lead
      const int lead = in.byte() % 3;
      Shape sizes;
      for (int d = 0; d < lead && sizes.rank() < forge::kMaxRank; ++d) sizes.push_back(in.number(-1, 3));
      for (int d = 0; d < rank && sizes.rank() < forge::kMaxRank; ++d) {
        const std::uint8_t how = in.byte();
        sizes.push_back(how < 100 ? -1 : how < 200 ? m.shape[d] : in.number(-2, 4));
      }
      call = [=] { return t.expand(sizes); };
      if (sizes.rank() < rank) return refuse();
      const int l = sizes.rank() - rank;
      Shape target = sizes;
      for (int d = 0; d < sizes.rank(); ++d) {
        if (sizes[d] != -1) continue;
        if (d < l) return refuse();
        target[d] = m.shape[d - l];
      }
      for (int d = 0; d < target.rank(); ++d) {
        if (target[d] < 0) return refuse();
        if (d >= l && m.shape[d - l] != target[d] && m.shape[d - l] != 1) return refuse();
      }
      if (!extents_ok(target)) return refuse();
      if (!small_numel(target)) return Step{.skip = true};
      return accept(m.gather(target, [&](const Dims& c, Dims& src) {
        for (int d = 0; d < rank; ++d) src[d] = m.shape[d] == target[d + l] ? c[d + l] : 0;
      }));
    }
    case 6: {  // unsqueeze
      const i64 dim = in.number(-rank - 2, rank + 2);
      call = [=] { return t.unsqueeze(dim); };
      const auto d = rank < forge::kMaxRank ? wrap(dim, rank + 1) : std::nullopt;
      if (!d) return refuse();
      Shape shape = m.shape;
      shape.insert(*d, 1);
      return accept(m.reshaped(shape));
    }
    case 7: {  // squeeze(), squeeze(dim)
      if (in.byte() % 2 == 0) {
        call = [=] { return t.squeeze(); };
        Shape shape;
        for (i64 e : m.shape)
          if (e != 1) shape.push_back(e);
        return accept(m.reshaped(shape));
      }
      const i64 dim = in.dim(rank);
      call = [=] { return t.squeeze(dim); };
      const auto d = wrap(dim, rank);
      if (!d) return refuse();
      if (rank == 0 || m.shape[*d] != 1) return accept(m);
      Shape shape = m.shape;
      shape.erase(*d);
      return accept(m.reshaped(shape));
    }
    case 8:
    case 9: {  // view, reshape
      const bool is_view = in.byte() % 2 == 0;
      const Shape requested = random_shape(in, m);
      const auto shape = infer(requested, static_cast<i64>(m.index.size()));
      if (shape && !small_numel(*shape)) return Step{.skip = true};
      call = [=] { return is_view ? t.view(requested) : t.reshape(requested); };
      if (!shape) return refuse();
      Step s = accept(m.reshaped(*shape));
      s.may_refuse = is_view;
      s.may_copy = !is_view;
      return s;
    }
    case 10: {  // flatten
      const i64 a = in.dim(rank), b = in.dim(rank);
      call = [=] { return t.flatten(a, b); };
      Shape shape;
      if (rank == 0) {
        shape = Shape{1};
      } else {
        const auto da = wrap(a, rank), db = wrap(b, rank);
        if (!da || !db || *da > *db) return refuse();
        i64 merged = 1;
        for (int d = 0; d < rank; ++d) {
          if (d < *da || d > *db) {
            shape.push_back(m.shape[d]);
          } else {
            merged *= m.shape[d];
            if (d == *db) shape.push_back(merged);
          }
        }
      }
      Step s = accept(m.reshaped(shape));
      s.may_copy = true;
      return s;
    }
    case 11: {  // t()
      call = [=] { return t.t(); };
      if (rank > 2) return refuse();
      if (rank < 2) return accept(m);
      return accept(m.gather(Shape{m.shape[1], m.shape[0]}, [&](const Dims& c, Dims& src) {
        src[0] = c[1];
        src[1] = c[0];
      }));
    }
    default: {  // view_with_strides: any geometry over the whole buffer
      const int shape_rank = in.byte() % (forge::kMaxRank + 1);
      const std::uint8_t odd = in.byte();
      const int strides_rank = odd < 12 ? odd % (forge::kMaxRank + 1) : shape_rank;
      Shape shape;
      Strides strides;
      for (int d = 0; d < shape_rank; ++d) shape.push_back(in.extent());
      for (int d = 0; d < strides_rank; ++d) strides.push_back(in.number(-6, 6));
      const i64 offset = in.number(-1, m.capacity + 1);
      if (extents_ok(shape) && !small_numel(shape)) return Step{.skip = true};
      call = [=] { return t.view_with_strides(shape, strides, offset); };
      auto r = predict_as_strided(m, shape, strides, offset);
      return r ? accept(std::move(*r)) : refuse();
    }
  }
}

}  // namespace

int fuzz_views(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const DType dtype = kDTypes[in.byte() % std::size(kDTypes)];
  const i64 high = in.byte(), low = in.byte();
  const i64 count = (high << 8 | low) % (kMaxBase + 1);
  return run({}, [&](forge::ExecContext& ctx) {
    // The base: count elements in memory the input owns, i % period(dtype).
    std::vector<double> values(static_cast<std::size_t>(count));
    for (i64 i = 0; i < count; ++i) values[static_cast<std::size_t>(i)] = static_cast<double>(i % period(dtype));
    const Tensor typed = ctx.from_vector(values).to(dtype);
    std::vector<std::byte> bytes(std::max<std::size_t>(typed.nbytes(), 1));
    if (count > 0) std::memcpy(bytes.data(), typed.raw_data(), typed.nbytes());
    Tensor t = ctx.from_blob(bytes.data(), Shape{count}, dtype);
    Model m{Shape{count}, {}, std::make_shared<const std::vector<double>>(std::move(values)), count};
    for (i64 i = 0; i < count; ++i) m.index.push_back(i);

    for (int op = 0; op < kMaxOps && !in.done(); ++op) {
      std::function<Tensor()> call;
      Step s = step(in, m, t, call);
      if (s.skip) continue;
      std::optional<Tensor> out;
      std::string refusal;
      try {
        out = call();
      } catch (const forge::Error& e) {
        if (!ok_code(e.code())) throw Violation(std::string("a view op refused with an unexpected code: ") + e.what());
        refusal = e.what();
      }
      if (!s.model) {
        require(!out, "forge accepted a view op the model refuses");
        continue;
      }
      if (!out) {
        if (s.may_refuse) continue;
        throw Violation("forge refused a view op the model accepts: " + refusal);
      }
      const bool copied = out->buffer().get() != t.buffer().get();
      require(!copied || s.may_copy, "a view op did not share its input's buffer");
      m = copied ? rebase(*s.model, *out) : std::move(*s.model);
      require(out->shape() == m.shape, "a view op's shape is not the model's");
      t = std::move(*out);
    }
    check_values(m, t);
  });
}

}  // namespace forge_fuzz
