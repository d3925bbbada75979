// The host-side math of the cuda backend's index-map copy, mask
// compactions, pools, dropout and attention (src/backend/cuda/index_math.h,
// pool_math.h, linalg_math.h: plain C++ that g++ compiles too), checked
// against the cpu kernels and brute force. The GPU kernels apply exactly
// these functions, so a machine without a GPU still tests what they compute.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/index_math.h"
#include "backend/cuda/linalg_math.h"
#include "backend/cuda/pool_math.h"
#include "backend/device_runtime.h"
#include "backend/kernels.h"
#include "support.h"

namespace {

namespace cu = forge::cuda;
namespace be = forge::backend;
using forge::DType;
using forge::Shape;
using forge::Strides;

const be::Kernels& cpu_table() { return *be::cpu_backend().kernels; }

forge::detail::DeviceRuntime& host_runtime(forge::ExecContext& ctx) {
  return ctx.runtime().device_runtime(forge::Device::cpu());
}

std::byte* bytes(void* p) { return static_cast<std::byte*>(p); }

// ---- mapped_copy ----

struct MappedCase {
  const char* name;
  Shape shape;                                  // out's
  std::vector<std::vector<std::int64_t>> maps;  // per dim, empty: identity
  std::int64_t period;
  bool flip_last;  // src read backwards along the last dim
};

TEST_CASE("cuda index math: mapped offsets match the cpu mapped_copy (maps, fill, tiled rows, flips)", "[cuda-math]") {
  forge_test::TestContext ctx;
  auto& dev = host_runtime(ctx);
  const std::vector<MappedCase> cases = {
      {"index maps with fill", Shape{3, 4, 5}, {{2, -1, 0}, {}, {-1, 0, 1, 2, -1}}, 0, false},
      {"tiled last dim", Shape{2, 3, 6}, {{}, {1, 0, 1}, {}}, 2, false},
      {"flip", Shape{2, 5}, {{}, {}}, 0, true},
      {"index_select middle", Shape{2, 4, 3}, {{}, {3, 3, 0, 1}, {}}, 0, false},
      {"0-D", Shape{}, {}, 0, false},
  };
  for (const MappedCase& c : cases) {
    INFO(c.name);
    const int r = c.shape.rank();
    // src [4, 4, 6] (packed), large enough for every map above.
    Shape src_shape;
    for (int d = 0; d < r; ++d) src_shape.push_back(6);
    Strides src_strides = forge::contiguous_strides(src_shape);
    std::vector<std::int64_t> src(static_cast<std::size_t>(std::max<std::int64_t>(src_shape.numel(), 1)));
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = 1000 + static_cast<std::int64_t>(i);
    std::byte* src_first = bytes(src.data());
    if (c.flip_last) {  // flip_kernel's view: start at the last element of the row, stride negated
      src_first += (c.shape[r - 1] - 1) * src_strides[r - 1] * 8;
      src_strides[r - 1] = -src_strides[r - 1];
    }
    const std::int64_t* maps[forge::kMaxRank] = {};
    for (int d = 0; d < r; ++d)
      if (!c.maps[static_cast<std::size_t>(d)].empty()) maps[d] = c.maps[static_cast<std::size_t>(d)].data();
    const std::int64_t fill = -7;
    const Strides out_strides = forge::contiguous_strides(c.shape);
    const std::int64_t n = c.shape.numel();
    std::vector<std::int64_t> want(static_cast<std::size_t>(n), 0);
    cpu_table().indexing.mapped_copy.fn(dev, c.shape, {bytes(want.data()), DType::i64, out_strides},
                                        {src_first, DType::i64, src_strides}, maps, c.period, &fill);
    const cu::MappedIndexer ix = cu::mapped_indexer(c.shape, out_strides, src_strides, maps, c.period);
    const auto* s = reinterpret_cast<const std::int64_t*>(src_first);
    std::set<std::int64_t> written;
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t oo = 0, so = 0;
      const std::int64_t got = ix.offsets(i, oo, so) ? s[so] : fill;
      INFO("element " << i);
      CHECK(written.insert(oo).second);
      CHECK(got == want[static_cast<std::size_t>(oo)]);
    }
    CHECK(static_cast<std::int64_t>(written.size()) == n);
  }
}

// ---- compactions ----

TEST_CASE("cuda index math: scan chunks give each thread consecutive flags, covering 0 to n once, in order",
          "[cuda-math]") {
  using C = cu::ScanChunks;
  for (const std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7}, C::kChunk - 1, C::kChunk,
                               C::kChunk + 1, 5 * C::kChunk + 123}) {
    INFO("n " << n);
    const C c = cu::scan_chunks(n);
    CHECK(c.count == (n + C::kChunk - 1) / C::kChunk);
    std::int64_t next = 0;
    for (std::int64_t b = 0; b < c.count; ++b)
      for (int t = 0; t < C::kThreadsPerChunk; ++t) {
        std::int64_t first = 0, last = 0;
        c.thread_span(b, t, first, last);
        REQUIRE(first == next);
        REQUIRE(last >= first);
        REQUIRE(last - first <= C::kPerThread);
        next = last;
      }
    CHECK(next == n);
  }
}

TEST_CASE("cuda index math: the three-pass scan over scan chunks gives each flag's prefix count", "[cuda-math]") {
  // The kernels' passes (compact_kernels.cu) replayed serially over the same
  // spans: chunk counts, their exclusive scan, then each thread's base.
  using C = cu::ScanChunks;
  std::mt19937_64 gen(11);
  for (const double density : {0.0, 0.03, 0.5, 1.0}) {
    const std::int64_t n = 3 * C::kChunk + 517;
    std::bernoulli_distribution flip(density);
    std::vector<std::uint8_t> flags(static_cast<std::size_t>(n));
    for (auto& f : flags) f = flip(gen) ? 1 : 0;
    const C c = cu::scan_chunks(n);
    std::vector<std::int64_t> counts(static_cast<std::size_t>(c.count), 0);
    for (std::int64_t b = 0; b < c.count; ++b)
      for (int t = 0; t < C::kThreadsPerChunk; ++t) {
        std::int64_t first = 0, last = 0;
        c.thread_span(b, t, first, last);
        for (std::int64_t i = first; i < last; ++i)
          counts[static_cast<std::size_t>(b)] += flags[static_cast<std::size_t>(i)];
      }
    std::int64_t before = 0;
    for (auto& k : counts) std::swap(k, before), before += k;  // exclusive
    std::vector<std::int64_t> pos(static_cast<std::size_t>(n));
    for (std::int64_t b = 0; b < c.count; ++b) {
      std::int64_t at = counts[static_cast<std::size_t>(b)];
      for (int t = 0; t < C::kThreadsPerChunk; ++t) {
        std::int64_t first = 0, last = 0;
        c.thread_span(b, t, first, last);
        for (std::int64_t i = first; i < last; ++i) {
          pos[static_cast<std::size_t>(i)] = at;
          at += flags[static_cast<std::size_t>(i)];
        }
      }
    }
    std::int64_t k = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      REQUIRE(pos[static_cast<std::size_t>(i)] == k);
      k += flags[static_cast<std::size_t>(i)];
    }
  }
}

TEST_CASE("cuda index math: compact_rows moves the widest unit both rows and addresses allow", "[cuda-math]") {
  alignas(16) std::byte buf[64];
  CHECK(cu::move_unit(16, buf, buf + 32) == 8);
  CHECK(cu::move_unit(12, buf, buf + 32) == 4);
  CHECK(cu::move_unit(6, buf, buf + 32) == 2);
  CHECK(cu::move_unit(3, buf, buf + 32) == 1);
  CHECK(cu::move_unit(16, buf + 4, buf) == 4);
  CHECK(cu::move_unit(16, buf, buf + 1) == 1);
}

// ---- pools ----

struct Axis {
  std::int64_t size, kernel, stride, pad, dilation;
  bool ceil_mode;
  std::int64_t out() const {  // libtorch's pooling output size
    const std::int64_t span = size + 2 * pad - dilation * (kernel - 1) - 1;
    std::int64_t o = (ceil_mode ? span + stride - 1 : span) / stride + 1;
    if (ceil_mode && (o - 1) * stride >= size + pad) --o;
    return o;
  }
};

std::vector<Axis> axes() {
  std::vector<Axis> v;
  for (const std::int64_t size : {1, 4, 7})
    for (const std::int64_t kernel : {1, 2, 3})
      for (const std::int64_t stride : {1, 2, 3})
        for (const std::int64_t pad : {0, 1})
          for (const std::int64_t dilation : {1, 2})
            for (const bool ceil_mode : {false, true}) {
              if (2 * pad > kernel) continue;
              const Axis a{size, kernel, stride, pad, dilation, ceil_mode};
              if (a.out() > 0) v.push_back(a);
            }
  return v;
}

TEST_CASE("cuda pool math: valid taps and covering outputs match brute force", "[cuda-math]") {
  for (const Axis& a : axes()) {
    const std::int64_t out = a.out();
    INFO("size " << a.size << " kernel " << a.kernel << " stride " << a.stride << " pad " << a.pad << " dilation "
                 << a.dilation << " out " << out);
    for (std::int64_t o = 0; o < out; ++o) {
      const std::int64_t start = o * a.stride - a.pad;
      const cu::TapRange t = cu::valid_taps(start, a.dilation, a.kernel, a.size);
      for (std::int64_t k = 0; k < a.kernel; ++k) {
        const std::int64_t i = start + k * a.dilation;
        CHECK((k >= t.first && k < t.last) == (i >= 0 && i < a.size));
      }
    }
    for (std::int64_t i = 0; i < a.size; ++i) {
      std::set<std::int64_t> want, got;
      for (std::int64_t o = 0; o < out; ++o)
        for (std::int64_t k = 0; k < a.kernel; ++k)
          if (o * a.stride - a.pad + k * a.dilation == i) want.insert(o);
      const cu::OutRange r = cu::covering_outputs(i, a.stride, a.pad, a.kernel, a.dilation, out);
      for (std::int64_t o = r.lo; o < r.hi; ++o)
        if (cu::tap_hits(i, o, a.stride, a.pad, a.dilation)) got.insert(o);
      INFO("input " << i);
      CHECK(got == want);
    }
  }
}

be::Window2d window(const Axis& h, const Axis& w) {
  be::Window2d win;
  win.n = 2, win.c = 1, win.h = h.size, win.w = w.size;
  win.out_h = h.out(), win.out_w = w.out();
  win.kernel_h = h.kernel, win.kernel_w = w.kernel;
  win.stride_h = h.stride, win.stride_w = w.stride;
  win.pad_h = h.pad, win.pad_w = w.pad;
  win.dilation_h = h.dilation, win.dilation_w = w.dilation;
  return win;
}

bool same(double a, double b) { return (a == b) || (std::isnan(a) && std::isnan(b)); }

TEST_CASE("cuda pool math: windows, means and both gradients match the cpu pools bit for bit", "[cuda-math]") {
  forge_test::TestContext ctx;
  auto& dev = host_runtime(ctx);
  std::mt19937_64 gen(3);
  std::uniform_int_distribution<int> level(0, 3);  // few levels: many ties
  const std::vector<Axis> all = axes();
  int checked = 0;
  for (std::size_t ih = 0; ih < all.size(); ih += 5) {
    for (std::size_t iw = 1; iw < all.size(); iw += 7) {
      const be::Window2d win = window(all[ih], all[iw]);
      const std::int64_t plane = win.h * win.w, out_plane = win.out_h * win.out_w;
      std::vector<double> x(static_cast<std::size_t>(win.n * plane)), g(static_cast<std::size_t>(win.n * out_plane));
      for (auto& v : x) v = level(gen) * 0.5;
      if (x.size() > 2) x[2] = std::numeric_limits<double>::quiet_NaN();
      for (auto& v : g) v = 0.25 + level(gen);
      const Strides xs = forge::contiguous_strides(Shape{win.n, 1, win.h, win.w});
      const Strides os = forge::contiguous_strides(Shape{win.n, 1, win.out_h, win.out_w});
      for (const bool include_pad : {true, false}) {
        be::Pool2dProblem p;
        p.dtype = DType::f64;
        p.win = win;
        p.count_include_pad = include_pad;
        p.x = bytes(x.data());
        p.x_strides = xs;
        p.out_strides = os;
        std::vector<double> max_out(g.size()), avg_out(g.size());
        p.out = bytes(max_out.data());
        cpu_table().conv.max_pool2d.fn(dev, p);
        p.out = bytes(avg_out.data());
        cpu_table().conv.avg_pool2d.fn(dev, p);
        be::Pool2dBackwardProblem b;
        b.dtype = DType::f64;
        b.win = win;
        b.count_include_pad = include_pad;
        b.x = bytes(x.data());
        b.x_strides = xs;
        b.grad_out = bytes(g.data());
        b.grad_out_strides = os;
        std::vector<double> max_grad(x.size()), avg_grad(x.size());
        b.grad_x = bytes(max_grad.data());
        cpu_table().conv.max_pool2d_backward.fn(dev, b);
        b.grad_x = bytes(avg_grad.data());
        cpu_table().conv.avg_pool2d_backward.fn(dev, b);
        for (std::int64_t n = 0; n < win.n; ++n) {
          const double* xp = x.data() + n * plane;
          const double* gp = g.data() + n * out_plane;
          const auto load_x = [&](std::int64_t h, std::int64_t w) { return xp[h * win.w + w]; };
          const auto load_g = [&](std::int64_t h, std::int64_t w) { return gp[h * win.out_w + w]; };
          for (std::int64_t o = 0; o < out_plane; ++o) {
            const std::int64_t oh = o / win.out_w, ow = o % win.out_w;
            INFO("h axis " << ih << " w axis " << iw << " output " << oh << "," << ow);
            CHECK(same(cu::window_max<double>(win, oh, ow, load_x).value, max_out[n * out_plane + o]));
            CHECK(same(cu::avg_pool_at<double>(win, include_pad, oh, ow, load_x), avg_out[n * out_plane + o]));
          }
          for (std::int64_t i = 0; i < plane; ++i) {
            const std::int64_t h = i / win.w, w = i % win.w;
            INFO("h axis " << ih << " w axis " << iw << " input " << h << "," << w);
            CHECK(cu::max_pool_grad_at<double>(win, h, w, load_x, load_g) == max_grad[n * plane + i]);
            CHECK(cu::avg_pool_grad_at<double>(win, include_pad, h, w, load_g) == avg_grad[n * plane + i]);
          }
        }
        ++checked;
      }
    }
  }
  CHECK(checked > 50);
}

// ---- dropout ----

TEST_CASE("cuda dropout math: the mask is the cpu dropout kernel's, bit for bit", "[cuda-math]") {
  forge_test::TestContext ctx;
  auto& dev = host_runtime(ctx);
  const std::int64_t n = 100000;
  std::vector<float> x(static_cast<std::size_t>(n), 1.0f), out(x.size());
  const Strides s{1};
  for (const double p : {0.1, 0.5, 0.9}) {
    for (const std::uint64_t seed : {std::uint64_t{0}, std::uint64_t{42}, ~std::uint64_t{0}}) {
      cpu_table().linalg.dropout.fn(dev, Shape{n}, {bytes(out.data()), DType::f32, s}, {bytes(x.data()), DType::f32, s},
                                    p, seed);
      const std::uint64_t threshold = cu::dropout_threshold(p);
      std::int64_t mismatches = 0;
      for (std::int64_t i = 0; i < n; ++i)
        mismatches += cu::dropout_keeps(seed, static_cast<std::uint64_t>(i), threshold) != (out[i] != 0.0f);
      INFO("p " << p << " seed " << seed);
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("cuda dropout math: keep rate, determinism and neighbour independence over 1M elements", "[cuda-math]") {
  const std::int64_t n = 1000000;
  for (const double p : {0.1, 0.5, 0.9}) {
    const std::uint64_t threshold = cu::dropout_threshold(p);
    const std::uint64_t seed = 0x1234abcdull;
    std::int64_t kept = 0, both = 0, differ = 0;
    bool previous = cu::dropout_keeps(seed, 0, threshold);
    for (std::int64_t i = 0; i < n; ++i) {
      const bool k = cu::dropout_keeps(seed, static_cast<std::uint64_t>(i), threshold);
      REQUIRE(k == cu::dropout_keeps(seed, static_cast<std::uint64_t>(i), threshold));
      kept += k;
      if (i > 0) both += k && previous;
      previous = k;
      differ += k != cu::dropout_keeps(seed + 1, static_cast<std::uint64_t>(i), threshold);
    }
    const double q = 1 - p, rate = static_cast<double>(kept) / n;
    const double sigma = std::sqrt(p * q / n);
    INFO("p " << p << " keep rate " << rate);
    CHECK(std::abs(rate - q) < 6 * sigma);
    // Neighbours: P(keep i and i + 1) = q^2 when independent.
    const double pair = static_cast<double>(both) / (n - 1);
    CHECK(std::abs(pair - q * q) < 6 * std::sqrt(q * q * (1 - q * q) / n));
    // Another seed is another mask: they differ with probability 2pq.
    const double d = static_cast<double>(differ) / n;
    CHECK(std::abs(d - 2 * p * q) < 6 * std::sqrt(2 * p * q * (1 - 2 * p * q) / n));
  }
  CHECK(cu::dropout_threshold(0.0) == 0);  // p = 0 keeps everything
  CHECK(cu::dropout_keeps(7, 0, cu::dropout_threshold(0.0)));
}

// ---- attention ----

TEST_CASE("cuda attention math: scores are scaled, masked to -inf and shifted by an additive mask", "[cuda-math]") {
  CHECK(cu::attention_score(2.0, 0.5, true, 0.0) == 1.0);
  CHECK(cu::attention_score(2.0, 0.5, true, -3.0) == -2.0);
  CHECK(cu::attention_score(2.0f, 0.25f, true, 1.0f) == 1.5f);
  CHECK(cu::attention_score(2.0, 0.5, false, 0.0) == -std::numeric_limits<double>::infinity());
  CHECK(cu::attention_score(std::numeric_limits<float>::quiet_NaN(), 1.0f, false, 0.0f) ==
        -std::numeric_limits<float>::infinity());
}

}  // namespace
