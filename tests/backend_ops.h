#pragma once
// The backend-ops harness, in the spirit of ggml's test-backend-ops: an op
// case runs on a reference target and on each target under test, and the two
// must give the same outputs and the same input gradients.
//
// - An OpCase names the op, the kernel-table entry it exercises
//   ("elementwise.binary"), the dtypes it runs in, and a body that builds its
//   inputs through an Env and hands each result to Env::emit.
// - Inputs are made without any kernel: values drawn on the host from a
//   generator seeded by the case, put in memory as they are (from_vector) and
//   viewed (transpose, slice with a step, expand). A target's Layout decides
//   whether an input is packed or the same values as a strided view, so a
//   wrong kernel shows only in what it computes.
// - emit reads every output back element by element (no kernel either) and,
//   when the case is differentiable and the dtype floating, backpropagates a
//   seeded upstream gradient into the inputs made with Env::leaf.
// - compare_results: integer and bool results must be equal; floating ones
//   equal where the case promises the same bits for the conditions that
//   differ (thread count, layout), else within a relative tolerance per dtype
//   (tolerance() below). Every mismatch names the case, the dtype, the target,
//   the output, its first differing index and both values.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/device_runtime.h"
#include "forge/forge.h"
#include "support.h"

namespace forge_test::backend_ops {

enum class Layout { contiguous, strided };

// Where a case runs: a context's device and thread count, and how its inputs
// are laid out.
struct Target {
  std::string name;
  forge::Device device = forge::Device::cpu();
  int threads = 1;
  Layout layout = Layout::contiguous;
};

// The reference every target is compared with.
inline Target reference_target() { return {"cpu, 1 thread, contiguous", forge::Device::cpu(), 1, Layout::contiguous}; }

// The host under other conditions: more threads (the parallel paths split
// the work), strided inputs (the strided paths), and both.
inline std::vector<Target> host_targets() {
  return {
      {"cpu, 4 threads, contiguous", forge::Device::cpu(), 4, Layout::contiguous},
      {"cpu, 1 thread, strided", forge::Device::cpu(), 1, Layout::strided},
      {"cpu, 4 threads, strided", forge::Device::cpu(), 4, Layout::strided},
  };
}

// cuda:0, packed and strided, when this build has the CUDA backend and a
// device is visible; none otherwise. Its contexts get the same host-drawn
// values (from_vector uploads them) and read_back() downloads its results. A
// different device never promises the host's bits, so compare_results holds
// it to the tolerance.
inline std::vector<Target> device_targets() {
  if (!forge::cuda_built() || forge::cuda_device_count() == 0) return {};
  return {
      {"cuda:0, contiguous", forge::Device::cuda(0), 1, Layout::contiguous},
      {"cuda:0, strided", forge::Device::cuda(0), 1, Layout::strided},
  };
}

// The targets under test: the host's, then the device's.
inline std::vector<Target> targets_under_test() {
  std::vector<Target> targets = host_targets();
  for (Target& t : device_targets()) targets.push_back(std::move(t));
  return targets;
}

// Which differences between two targets leave floating results bit for bit
// the same (integer and bool results always must be).
struct Exactness {
  bool out_threads = true;   // outputs, across thread counts
  bool out_layouts = true;   // outputs, across input layouts
  bool grad_threads = true;  // input gradients, across thread counts
  bool grad_layouts = true;  // input gradients, across input layouts
};
inline constexpr Exactness kExact{};
inline constexpr Exactness kExactOutputs{true, true, false, false};  // the backward reduces (broadcast, shared weights)
inline constexpr Exactness kExactThreads{true, false, true, false};  // a strided input takes another path
inline constexpr Exactness kClose{false, false, false, false};

class Env;

struct OpCase {
  std::string name;   // "add"
  std::string entry;  // the kernel family and entry it exercises: "elementwise.binary"
  std::vector<forge::DType> dtypes;
  bool differentiable = true;  // floating runs also backpropagate into Env::leaf inputs
  Exactness exact = kExact;
  double tolerance_scale = 1;  // times tolerance(dtype), for the comparisons that are not exact
  std::function<void(Env&)> body;
};

// The relative tolerance of a result of `dtype` computed in another order.
inline double tolerance(forge::DType dtype) {
  switch (dtype) {
    case forge::DType::f32:
      return 1e-5;
    case forge::DType::f64:
      return 1e-12;
    case forge::DType::f16:
      return 0x1p-9;  // 2 ulp: f16 results are f32 results rounded once
    case forge::DType::bf16:
      return 0x1p-6;
    default:
      return 0;
  }
}

// One result as read back: an output or an input's gradient.
struct Output {
  std::string label;  // "[48, 900] + [900]: out 0", "...: grad of input 1"
  bool gradient = false;
  bool defined = true;
  forge::Shape shape;
  forge::DType dtype = forge::DType::f32;
  std::vector<double> values;  // row-major over shape
};

struct Results {
  std::vector<Output> outputs;
  std::string error;  // the message of a forge::Error the run threw, or empty
};

namespace detail {

inline double load(const std::byte* p, forge::DType dtype) {
  switch (dtype) {
    case forge::DType::f32:
      return *reinterpret_cast<const float*>(p);
    case forge::DType::f64:
      return *reinterpret_cast<const double*>(p);
    case forge::DType::f16:
      return forge::Half::to_float(*reinterpret_cast<const std::uint16_t*>(p));
    case forge::DType::bf16:
      return forge::BFloat16::to_float(*reinterpret_cast<const std::uint16_t*>(p));
    case forge::DType::i32:
      return *reinterpret_cast<const std::int32_t*>(p);
    case forge::DType::i64:
      return static_cast<double>(*reinterpret_cast<const std::int64_t*>(p));
    case forge::DType::u8:
      return *reinterpret_cast<const std::uint8_t*>(p);
    case forge::DType::i8:
      return *reinterpret_cast<const std::int8_t*>(p);
    case forge::DType::boolean:
      return *reinterpret_cast<const std::uint8_t*>(p) != 0 ? 1 : 0;
  }
  return 0;
}

template <typename T>
std::vector<T> converted(const std::vector<double>& v) {
  std::vector<T> out;
  out.reserve(v.size());
  for (double x : v) {
    if constexpr (std::is_same_v<T, forge::Half> || std::is_same_v<T, forge::BFloat16>)
      out.push_back(T(static_cast<float>(x)));
    else
      out.push_back(static_cast<T>(x));
  }
  return out;
}

// A packed tensor holding `values` (row-major), put in memory without a kernel.
inline forge::Tensor put(forge::ExecContext& ctx, const std::vector<double>& values, const forge::Shape& shape,
                         forge::DType dtype) {
  switch (dtype) {
    case forge::DType::f32:
      return ctx.from_vector(converted<float>(values), shape);
    case forge::DType::f64:
      return ctx.from_vector(values, shape);
    case forge::DType::f16:
      return ctx.from_vector(converted<forge::Half>(values), shape);
    case forge::DType::bf16:
      return ctx.from_vector(converted<forge::BFloat16>(values), shape);
    case forge::DType::i32:
      return ctx.from_vector(converted<std::int32_t>(values), shape);
    case forge::DType::i64:
      return ctx.from_vector(converted<std::int64_t>(values), shape);
    case forge::DType::u8:
      return ctx.from_vector(converted<std::uint8_t>(values), shape);
    case forge::DType::i8:
      return ctx.from_vector(converted<std::int8_t>(values), shape);
    case forge::DType::boolean: {
      std::vector<bool> b;
      for (double x : values) b.push_back(x != 0);
      return ctx.from_vector(b, shape);
    }
  }
  return {};
}

// What fills the elements a strided view skips: values no op may read (NaN,
// or an index out of every range).
inline double filler(forge::DType dtype) {
  switch (dtype) {
    case forge::DType::u8:
      return 251;
    case forge::DType::i8:
      return -125;
    case forge::DType::boolean:
      return 1;
    case forge::DType::i32:
    case forge::DType::i64:
      return 1e9;
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

// The bytes a device tensor's view spans, downloaded as they lie (no kernel
// packs them first) into `into`; returns where its first element landed.
inline const std::byte* download_view(const forge::Tensor& t, std::vector<std::byte>& into) {
  std::int64_t lo = 0, hi = 0;  // the lowest and highest element offsets from the first element
  for (int d = 0; d < t.dim(); ++d) {
    const std::int64_t reach = (t.size(d) - 1) * t.stride(d);
    (reach < 0 ? lo : hi) += reach;
  }
  const auto size = static_cast<std::int64_t>(t.element_size());
  into.resize(static_cast<std::size_t>((hi - lo + 1) * size));
  const std::byte* first = t.buffer()->data() + t.offset() * size;
  t.impl()->device_runtime()->download(into.data(), first + lo * size, into.size(), /*non_blocking=*/false);
  return into.data() - lo * size;
}

inline std::string index_str(const forge::Shape& shape, std::int64_t flat) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(shape.rank()));
  for (int d = shape.rank() - 1; d >= 0; --d) {
    idx[static_cast<std::size_t>(d)] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < idx.size(); ++i) s << (i ? ", " : "") << idx[i];
  s << ']';
  return s.str();
}

}  // namespace detail

// Reads t back element by element from its memory: no kernel runs, so a
// planted kernel cannot hide in the read. A device tensor's memory comes to
// the host first, as it lies.
inline Output read_back(std::string label, const forge::Tensor& t, bool gradient) {
  Output out{std::move(label), gradient, t.defined()};
  if (!t.defined()) return out;
  out.shape = t.shape();
  out.dtype = t.dtype();
  const std::int64_t n = t.numel();
  if (n == 0) return out;
  std::vector<std::byte> downloaded;
  const std::byte* base = t.device().is_cpu() ? static_cast<const std::byte*>(t.raw_data("read_back"))
                                              : detail::download_view(t, downloaded);
  const std::size_t size = t.element_size();
  const int rank = t.dim();
  std::vector<std::int64_t> idx(static_cast<std::size_t>(rank), 0);
  out.values.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t off = 0;
    for (int d = 0; d < rank; ++d) off += idx[static_cast<std::size_t>(d)] * t.strides()[d];
    out.values.push_back(detail::load(base + off * static_cast<std::int64_t>(size), out.dtype));
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < out.shape[d]) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
  return out;
}

// What an input holds. Integer and bool dtypes take whole numbers: normal()
// becomes [-8, 8] (u8 [0, 15], bool {0, 1}), uniform(lo, hi) its integers.
struct Values {
  enum class Kind { normal, uniform, integers } kind = Kind::normal;
  double lo = 0, hi = 0;
};
inline Values normal() { return {}; }
inline Values uniform(double lo, double hi) { return {Values::Kind::uniform, lo, hi}; }
inline Values integers(double lo, double hi) { return {Values::Kind::integers, lo, hi}; }

struct Spec {
  Values values = normal();
  std::optional<forge::DType> dtype;  // default: the case's dtype
  // The input is this shape expanded: a stride-0 view in a strided layout,
  // the repeated values packed otherwise.
  std::optional<forge::Shape> expand_from;
  bool packed = false;  // packed in every layout (optimizer parameters)
};

// What an op case's body builds its inputs with and hands its results to.
class Env {
 public:
  Env(forge::ExecContext& ctx, forge::DType dtype, Layout layout, bool backward, std::uint64_t seed)
      : ctx_(ctx), dtype_(dtype), layout_(layout), backward_(backward), rng_(seed) {}

  forge::ExecContext& ctx() noexcept { return ctx_; }
  forge::DType dtype() const noexcept { return dtype_; }
  Layout layout() const noexcept { return layout_; }
  // Whether this run backpropagates (the case is differentiable and the dtype floating).
  bool backward() const noexcept { return backward_; }

  forge::Tensor input(const forge::Shape& shape, const Spec& spec = {}) {
    const forge::DType dtype = spec.dtype.value_or(dtype_);
    if (spec.expand_from) {
      const forge::Shape& base = *spec.expand_from;
      const std::vector<double> v = draw(base.numel(), spec.values, dtype);
      if (layout_ == Layout::strided) return detail::put(ctx_, v, base, dtype).expand(shape);
      return detail::put(ctx_, broadcast(v, base, shape), shape, dtype);
    }
    const std::vector<double> v = draw(shape.numel(), spec.values, dtype);
    return spec.packed ? detail::put(ctx_, v, shape, dtype) : lay_out(v, shape, dtype);
  }
  // An input the backward differentiates with respect to (when it runs).
  forge::Tensor leaf(const forge::Shape& shape, const Spec& spec = {}) {
    forge::Tensor t = input(shape, spec);
    if (backward_ && forge::is_floating(t.dtype())) {
      t.requires_grad_();
      leaves_.push_back(t);
    }
    return t;
  }
  // i64 indices in [lo, hi].
  forge::Tensor index(const forge::Shape& shape, std::int64_t lo, std::int64_t hi) {
    return input(shape,
                 {.values = integers(static_cast<double>(lo), static_cast<double>(hi)), .dtype = forge::DType::i64});
  }
  // bool, true with probability one half.
  forge::Tensor mask(const forge::Shape& shape) { return input(shape, {.dtype = forge::DType::boolean}); }
  // A packed parameter that requires grad (optimizers take only those).
  forge::Tensor param(const forge::Shape& shape) {
    forge::Tensor t = input(shape, {.packed = true});
    t.requires_grad_();
    return t;
  }

  // Records outputs; when this run backpropagates, weights every output that
  // requires grad with a seeded tensor and records the gradients of the
  // leaves made since the last emit.
  void emit(const std::string& label, const std::vector<forge::Tensor>& outputs) {
    for (std::size_t k = 0; k < outputs.size(); ++k)
      results_.outputs.push_back(read_back(label + ": out " + std::to_string(k), outputs[k], false));
    std::vector<forge::Tensor> wrt = std::move(leaves_);
    leaves_.clear();
    if (wrt.empty()) return;
    std::vector<forge::Tensor> outs, weights;
    for (const forge::Tensor& o : outputs) {
      // Integer results carry no gradient (a cast to an integer dtype still
      // records itself, but a seed must be floating).
      if (!o.defined() || !o.requires_grad() || !forge::is_floating(o.dtype())) continue;
      outs.push_back(o);
      weights.push_back(detail::put(ctx_, draw(o.numel(), normal(), o.dtype()), o.shape(), o.dtype()));
    }
    if (outs.empty()) return;
    const std::vector<forge::Tensor> grads =
        forge::autograd::grad(outs, wrt, {.grad_outputs = weights, .allow_unused = true});
    for (std::size_t k = 0; k < grads.size(); ++k)
      results_.outputs.push_back(read_back(label + ": grad of input " + std::to_string(k), grads[k], true));
  }
  // Records a number an op returned (clip_grad_norm_'s norm).
  void emit_value(const std::string& label, double value) {
    results_.outputs.push_back({label + ": value", false, true, forge::Shape{}, forge::DType::f64, {value}});
  }

  Results take() { return std::move(results_); }

 private:
  std::vector<double> draw(std::int64_t n, Values values, forge::DType dtype) {
    if (!forge::is_floating(dtype)) {
      if (dtype == forge::DType::boolean) {
        values = integers(0, 1);
      } else if (values.kind == Values::Kind::normal) {
        values = dtype == forge::DType::u8 ? integers(0, 15) : integers(-8, 8);
      } else if (values.kind == Values::Kind::uniform) {
        values = integers(std::ceil(values.lo), std::floor(values.hi));
      }
      if (dtype == forge::DType::u8) {
        values.lo = std::max(values.lo, 0.0);
        values.hi = std::min(values.hi, 255.0);
      }
      if (dtype == forge::DType::i8) {
        values.lo = std::max(values.lo, -128.0);
        values.hi = std::min(values.hi, 127.0);
      }
    }
    std::vector<double> v(static_cast<std::size_t>(n));
    std::normal_distribution<double> gauss;
    std::uniform_real_distribution<double> flat(values.lo, values.hi);
    std::uniform_int_distribution<std::int64_t> whole(static_cast<std::int64_t>(values.lo),
                                                      static_cast<std::int64_t>(values.hi));
    for (double& x : v) {
      switch (values.kind) {
        case Values::Kind::normal:
          x = gauss(rng_);
          break;
        case Values::Kind::uniform:
          x = flat(rng_);
          break;
        case Values::Kind::integers:
          x = static_cast<double>(whole(rng_));
          break;
      }
    }
    return v;
  }

  static std::vector<double> broadcast(const std::vector<double>& v, const forge::Shape& base,
                                       const forge::Shape& shape) {
    std::vector<double> out(static_cast<std::size_t>(shape.numel()));
    const int rank = shape.rank(), lead = shape.rank() - base.rank();
    for (std::int64_t i = 0; i < shape.numel(); ++i) {
      std::int64_t rest = i, src = 0, stride = 1;
      for (int d = rank - 1; d >= 0; --d) {
        const std::int64_t at = rest % shape[d];
        rest /= shape[d];
        if (d >= lead) {
          const std::int64_t extent = base[d - lead];
          src += (extent == 1 ? 0 : at) * stride;
          stride *= extent;
        }
      }
      out[static_cast<std::size_t>(i)] = v[static_cast<std::size_t>(src)];
    }
    return out;
  }

  // The values `v` (row-major over shape) packed, or in the strided layout
  // as a view of a larger buffer, cycling through three views: the last two
  // dims transposed, every other element of a longer last dim, every other
  // row of a taller first dim from row 3. The skipped elements hold filler().
  forge::Tensor lay_out(const std::vector<double>& v, const forge::Shape& shape, forge::DType dtype) {
    if (layout_ == Layout::contiguous) return detail::put(ctx_, v, shape, dtype);
    const int r = shape.rank();
    const double pad = detail::filler(dtype);
    if (r == 0) return detail::put(ctx_, {pad, v[0], pad}, forge::Shape{3}, dtype).select(0, 1);
    int variant = next_view_++ % 3;
    if (variant == 0 && r < 2) variant = 1;
    const std::int64_t n = shape.numel();
    if (variant == 0) {
      const std::int64_t rows = shape[r - 2], cols = shape[r - 1];
      forge::Shape s = shape;
      std::swap(s[r - 2], s[r - 1]);
      std::vector<double> storage(v.size());
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t plane = i / (rows * cols), row = i / cols % rows, col = i % cols;
        storage[static_cast<std::size_t>(plane * rows * cols + col * rows + row)] = v[static_cast<std::size_t>(i)];
      }
      return detail::put(ctx_, storage, s, dtype).transpose(r - 2, r - 1);
    }
    if (variant == 1) {
      const std::int64_t cols = shape[r - 1], wide = 2 * cols + 1;
      forge::Shape s = shape;
      s[r - 1] = wide;
      std::vector<double> storage(static_cast<std::size_t>(s.numel()), pad);
      for (std::int64_t i = 0; i < n; ++i)
        storage[static_cast<std::size_t>(i / cols * wide + 2 * (i % cols) + 1)] = v[static_cast<std::size_t>(i)];
      return detail::put(ctx_, storage, s, dtype).slice(r - 1, 1, wide, 2);
    }
    const std::int64_t rows = shape[0];
    forge::Shape s = shape;
    s[0] = 2 * rows + 3;
    std::int64_t inner = 1;
    for (int d = 1; d < r; ++d) inner *= shape[d];
    std::vector<double> storage(static_cast<std::size_t>(s.numel()), pad);
    for (std::int64_t i = 0; i < n; ++i)
      storage[static_cast<std::size_t>((3 + 2 * (i / inner)) * inner + i % inner)] = v[static_cast<std::size_t>(i)];
    return detail::put(ctx_, storage, s, dtype).slice(0, 3, 3 + 2 * rows, 2);
  }

  forge::ExecContext& ctx_;
  forge::DType dtype_;
  Layout layout_;
  bool backward_;
  std::mt19937_64 rng_;
  int next_view_ = 0;
  std::vector<forge::Tensor> leaves_;
  Results results_;
};

// The seed of a case in a dtype: the same on every target (FNV-1a of the name).
inline std::uint64_t case_seed(const OpCase& c, forge::DType dtype) {
  std::uint64_t h = 1469598103934665603ULL;
  for (char ch : c.name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
  return h ^ (static_cast<std::uint64_t>(dtype) + 1) * 0x9e3779b97f4a7c15ULL;
}

// Runs one case in one dtype on ctx, laid out as `target` says. The context's
// generator is reseeded first, so dropout draws the same masks everywhere.
inline Results run_case(const OpCase& c, forge::DType dtype, const Target& target, forge::ExecContext& ctx) {
  const std::uint64_t seed = case_seed(c, dtype);
  ctx.manual_seed(seed);
  Env env(ctx, dtype, target.layout, c.differentiable && forge::is_floating(dtype), seed);
  try {
    c.body(env);
  } catch (const forge::Error& e) {
    Results r = env.take();
    r.error = e.what();
    return r;
  }
  return env.take();
}

// The mismatches between a reference run and a target's run of one case, each
// a line naming the case, its entry, the dtype, the target, the output, the
// first differing index and both values. Empty when they agree.
inline std::vector<std::string> compare_results(const OpCase& c, forge::DType dtype, const Target& reference,
                                                const Target& target, const Results& want, const Results& got) {
  std::vector<std::string> mismatches;
  const std::string where = c.name + " (" + c.entry + ") in " + std::string(forge::dtype_name(dtype)) + " on " +
                            target.name + " vs " + reference.name;
  if (want.error != got.error) {
    mismatches.push_back(where + ": the reference " + (want.error.empty() ? "ran" : "threw \"" + want.error + "\"") +
                         ", the target " + (got.error.empty() ? "ran" : "threw \"" + got.error + "\""));
  }
  if (want.outputs.size() != got.outputs.size()) {
    mismatches.push_back(where + ": " + std::to_string(want.outputs.size()) + " results vs " +
                         std::to_string(got.outputs.size()));
    return mismatches;
  }
  const bool other_device = target.device != reference.device;
  const bool other_threads = target.threads != reference.threads;
  const bool other_layout = target.layout != reference.layout;
  for (std::size_t k = 0; k < want.outputs.size(); ++k) {
    const Output& a = want.outputs[k];
    const Output& b = got.outputs[k];
    const std::string head = where + ": " + a.label;
    if (a.label != b.label || a.defined != b.defined || a.shape != b.shape || a.dtype != b.dtype) {
      std::ostringstream s;
      s << head << ": expected " << (a.defined ? "" : "undefined ") << a.shape.str() << ' '
        << forge::dtype_name(a.dtype) << ", got " << b.label << ' ' << (b.defined ? "" : "undefined ") << b.shape.str()
        << ' ' << forge::dtype_name(b.dtype);
      mismatches.push_back(s.str());
      continue;
    }
    const bool floating = forge::is_floating(a.dtype);
    bool exact = !floating;
    if (floating && !other_device) {
      const bool by_threads = a.gradient ? c.exact.grad_threads : c.exact.out_threads;
      const bool by_layout = a.gradient ? c.exact.grad_layouts : c.exact.out_layouts;
      exact = (!other_threads || by_threads) && (!other_layout || by_layout);
    }
    const double rtol = tolerance(a.dtype) * c.tolerance_scale;
    double scale = 0;  // the mean magnitude: differences are measured against it near zero
    for (double x : a.values)
      if (std::isfinite(x)) scale += std::abs(x);
    if (!a.values.empty()) scale /= static_cast<double>(a.values.size());
    std::int64_t first = -1, count = 0;
    for (std::size_t i = 0; i < a.values.size(); ++i) {
      const double x = a.values[i], y = b.values[i];
      bool same = x == y || (std::isnan(x) && std::isnan(y));
      if (!same && !exact && std::isfinite(x) && std::isfinite(y))
        same = std::abs(x - y) <= rtol * (std::max(std::abs(x), std::abs(y)) + scale);
      if (same) continue;
      if (first < 0) first = static_cast<std::int64_t>(i);
      ++count;
    }
    if (first < 0) continue;
    std::ostringstream s;
    s.precision(17);
    s << head << ": " << count << " of " << a.values.size() << " elements differ"
      << (exact ? " (exact)" : " (rtol " + std::to_string(rtol) + ")") << ", first at "
      << detail::index_str(a.shape, first) << " of " << a.shape.str() << ": expected "
      << a.values[static_cast<std::size_t>(first)] << ", got " << b.values[static_cast<std::size_t>(first)];
    mismatches.push_back(s.str());
  }
  return mismatches;
}

// Runs a case in a dtype on the reference and on a target (each on its own
// context) and compares them.
inline std::vector<std::string> compare_case(const OpCase& c, forge::DType dtype, const Target& reference,
                                             forge::ExecContext& reference_ctx, const Target& target,
                                             forge::ExecContext& target_ctx) {
  const Results want = run_case(c, dtype, reference, reference_ctx);
  const Results got = run_case(c, dtype, target, target_ctx);
  return compare_results(c, dtype, reference, target, want, got);
}

// Runs each case in each of its dtypes on the reference and on each target
// (every one on a context of its own); every disagreement is a failed CHECK
// naming the case, the dtype and the target. Returns the number of target
// runs compared.
inline int check_cases(const std::vector<const OpCase*>& cases, const std::vector<Target>& targets) {
  const Target reference = reference_target();
  TestContext reference_ctx(context_options(reference.threads, {}, {}, reference.device));
  std::vector<std::unique_ptr<TestContext>> contexts;
  for (const Target& t : targets)
    contexts.push_back(std::make_unique<TestContext>(context_options(t.threads, {}, {}, t.device)));
  int runs = 0;
  for (const OpCase* c : cases) {
    for (const forge::DType dtype : c->dtypes) {
      const Results want = run_case(*c, dtype, reference, reference_ctx);
      INFO("case " << c->name << " (" << c->entry << ") in " << forge::dtype_name(dtype));
      CHECK(want.error == "");
      CHECK(!want.outputs.empty());
      for (std::size_t t = 0; t < targets.size(); ++t) {
        const Results got = run_case(*c, dtype, targets[t], *contexts[t]);
        for (const std::string& m : compare_results(*c, dtype, reference, targets[t], want, got)) {
          INFO(m);
          CHECK(false);
        }
        ++runs;
      }
    }
  }
  return runs;
}

}  // namespace forge_test::backend_ops
