// Views: every view op checked the same way against a naive index map. For
// each: the values read through the view match the parent at the mapped index
// (read straight from the buffer and through the copy kernel), the view shares
// the parent's buffer and allocates nothing, it outlives its parent, and a
// write through it lands in the parent at exactly the mapped elements. Then
// the errors of each op, and writes through expanded views.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "support.h"

namespace {

using forge::DType;
using forge::ErrorCode;
using forge::Shape;
using forge::Strides;
using forge::Tensor;
using forge_test::TestContext;
using Index = std::vector<std::int64_t>;

// The element at `index` read straight from the buffer (f64 tensors only).
double read_at(const Tensor& t, const Index& index) {
  REQUIRE(t.dtype() == DType::f64);
  std::int64_t off = t.offset();
  for (int d = 0; d < t.dim(); ++d) off += index[static_cast<std::size_t>(d)] * t.strides()[d];
  double v;
  std::memcpy(&v, t.buffer()->data() + off * 8, sizeof v);
  return v;
}

// Calls fn(index) for every index of `shape` in row-major order.
void for_each_index(const Shape& shape, const std::function<void(const Index&)>& fn) {
  if (shape.numel() == 0) return;
  Index index(static_cast<std::size_t>(shape.rank()), 0);
  for (std::int64_t i = 0; i < shape.numel(); ++i) {
    fn(index);
    for (int d = shape.rank() - 1; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < shape[d]) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
}

// Row-major flat position of `index` in `shape`.
std::int64_t flat(const Shape& shape, const Index& index) {
  REQUIRE(static_cast<int>(index.size()) == shape.rank());
  std::int64_t f = 0;
  for (int d = 0; d < shape.rank(); ++d) {
    REQUIRE(index[static_cast<std::size_t>(d)] >= 0);
    REQUIRE(index[static_cast<std::size_t>(d)] < shape[d]);
    f = f * shape[d] + index[static_cast<std::size_t>(d)];
  }
  return f;
}

// A packed f64 parent whose element at flat position i holds i.
Tensor make_parent(TestContext& ctx, const Shape& shape) {
  std::vector<double> v(static_cast<std::size_t>(shape.numel()));
  std::iota(v.begin(), v.end(), 0.0);
  return ctx.from_vector<double>(v, shape);
}

using MakeView = std::function<Tensor(const Tensor&)>;
using ToParent = std::function<Index(const Index&)>;

// The four properties every view has (see the file comment). `writable` is
// false for views with an expanded dimension, where a write must be refused.
void check_view(TestContext& ctx, const Shape& parent_shape, const MakeView& make, const Shape& expected_shape,
                const ToParent& to_parent, bool writable = true) {
  INFO("parent " << parent_shape << ", view " << expected_shape);
  // Values, shared buffer, no allocation.
  {
    const Tensor parent = make_parent(ctx, parent_shape);
    const auto before = ctx.stats().outstanding;
    const Tensor v = make(parent);
    CHECK(ctx.stats().outstanding == before);
    REQUIRE(v.shape() == expected_shape);
    CHECK(v.dtype() == parent.dtype());
    CHECK(v.buffer().get() == parent.buffer().get());
    CHECK(&v.runtime() == &parent.runtime());
    std::vector<double> expected;
    for_each_index(expected_shape, [&](const Index& i) {
      const double want = static_cast<double>(flat(parent_shape, to_parent(i)));
      expected.push_back(want);
      CHECK(read_at(v, i) == want);
    });
    CHECK(v.to_vector<double>() == expected);  // through the copy kernel
    CHECK(v.clone().to_vector<double>() == expected);
    CHECK(v.numel() == expected_shape.numel());
  }
  // The view outlives its parent.
  {
    Tensor parent = make_parent(ctx, parent_shape);
    const Tensor v = make(parent);
    const auto held = ctx.stats().outstanding;
    parent = Tensor();
    CHECK(ctx.stats().outstanding == held);  // the buffer stays with the view
    std::vector<double> expected;
    for_each_index(expected_shape,
                   [&](const Index& i) { expected.push_back(static_cast<double>(flat(parent_shape, to_parent(i)))); });
    CHECK(v.to_vector<double>() == expected);
  }
  // A write through the view lands in the parent at exactly the mapped elements.
  {
    const Tensor parent = make_parent(ctx, parent_shape);
    Tensor v = make(parent);
    std::set<std::int64_t> touched;
    for_each_index(expected_shape, [&](const Index& i) { touched.insert(flat(parent_shape, to_parent(i))); });
    if (!writable) {
      FORGE_REQUIRE_ERROR(invalid_argument, "fill_", v.fill_(-1));
      touched.clear();  // nothing may have changed
    } else {
      v.fill_(-1);
    }
    const std::vector<double> after = parent.to_vector<double>();
    for (std::int64_t k = 0; k < parent_shape.numel(); ++k)
      CHECK(after[static_cast<std::size_t>(k)] == (touched.count(k) ? -1.0 : static_cast<double>(k)));
  }
}

}  // namespace

// ============================================================================
// each view op: values, sharing, lifetime, writes
// ============================================================================

TEST_CASE("views: clone_view aliases the whole tensor") {
  TestContext ctx;
  check_view(
      ctx, {3, 4}, [](const Tensor& p) { return p.clone_view(); }, {3, 4}, [](const Index& i) { return i; });
  check_view(
      ctx, {3, 4}, [](const Tensor& p) { return p.t().clone_view(); }, {4, 3},
      [](const Index& i) {
        return Index{i[1], i[0]};
      });
  const Tensor a = ctx.zeros({2});
  const Tensor v = a.clone_view();
  CHECK_FALSE(v.is_same(a));  // a new impl over the same buffer
  CHECK(v.buffer().get() == a.buffer().get());
}

TEST_CASE("views: view_with_strides maps (shape, strides, offset) onto the buffer, negative strides too") {
  TestContext ctx;
  // Element (i, j) at 1 + i + 3j of a 12-element buffer.
  check_view(
      ctx, {12},
      [](const Tensor& p) {
        return p.view_with_strides({3, 2}, {1, 3}, 1);
      },
      {3, 2}, [](const Index& i) { return Index{1 + i[0] + 3 * i[1]}; });
  // Reversed.
  check_view(
      ctx, {6}, [](const Tensor& p) { return p.view_with_strides({5}, {-1}, 4); }, {5},
      [](const Index& i) { return Index{4 - i[0]}; });
  // Offsets are absolute in the buffer, not relative to the tensor viewed.
  check_view(
      ctx, {3, 4},
      [](const Tensor& p) {
        return p.narrow(0, 2, 1).view_with_strides({2, 2}, {4, 1}, 1);
      },
      {2, 2},
      [](const Index& i) {
        return Index{i[0], 1 + i[1]};
      });
  // A stride-0 dimension of size 1 is not an expansion: still writable.
  check_view(
      ctx, {3},
      [](const Tensor& p) {
        return p.view_with_strides({3, 1}, {1, 0}, 0);
      },
      {3, 1}, [](const Index& i) { return Index{i[0]}; });
  // An overlapping stride-0 view of size > 1 reads fine but is not writable.
  check_view(
      ctx, {3},
      [](const Tensor& p) {
        return p.view_with_strides({2, 3}, {0, 1}, 0);
      },
      {2, 3}, [](const Index& i) { return Index{i[1]}; }, /*writable=*/false);
}

TEST_CASE("views: view_with_strides is bounds-checked against the buffer") {
  TestContext ctx;
  const Tensor p = make_parent(ctx, {12});
  // Exactly the whole buffer is fine, also from a narrowed tensor.
  CHECK(p.view_with_strides({12}, {1}, 0).numel() == 12);
  CHECK(p.view_with_strides({2}, {11}, 0).to_vector<double>() == std::vector<double>{0, 11});
  CHECK(p.narrow(0, 4, 2).view_with_strides({12}, {1}, 0).to_vector<double>()[11] == 11);
  CHECK(p.view_with_strides({0, 5}, {100, 100}, 0).numel() == 0);
  const auto before = ctx.stats().outstanding;
  std::string msg = FORGE_REQUIRE_ERROR(out_of_range, "view_with_strides", p.view_with_strides({4, 4}, {4, 1}, 0));
  CHECK_THAT(msg, Catch::Contains("[4, 4]") && Catch::Contains("[4, 1]") && Catch::Contains("12"));
  FORGE_REQUIRE_ERROR(out_of_range, "view_with_strides", p.view_with_strides({12}, {1}, 1));
  FORGE_REQUIRE_ERROR(out_of_range, "view_with_strides", p.view_with_strides({3}, {-1}, 1));  // reaches -1
  msg = FORGE_REQUIRE_ERROR(out_of_range, "view_with_strides", p.view_with_strides({2}, {1}, -1));
  CHECK_THAT(msg, Catch::Contains("-1"));
  FORGE_REQUIRE_ERROR(invalid_argument, "view_with_strides", p.view_with_strides({3}, {1, 1}, 0));
  FORGE_REQUIRE_ERROR(invalid_argument, "view_with_strides", p.view_with_strides({-3}, {1}, 0));
  CHECK(ctx.stats().outstanding == before);
}

TEST_CASE("views: view and reshape reinterpret packed memory without a copy, inferring one -1") {
  TestContext ctx;
  check_view(
      ctx, {12},
      [](const Tensor& p) {
        return p.view({3, 4});
      },
      {3, 4}, [](const Index& i) { return Index{4 * i[0] + i[1]}; });
  check_view(
      ctx, {3, 4},
      [](const Tensor& p) {
        return p.reshape({2, -1});
      },
      {2, 6},
      [](const Index& i) {
        return Index{(6 * i[0] + i[1]) / 4, (6 * i[0] + i[1]) % 4};
      });
  check_view(
      ctx, {2, 6}, [](const Tensor& p) { return p.view({-1}); }, {12},
      [](const Index& i) {
        return Index{i[0] / 6, i[0] % 6};
      });
  check_view(
      ctx, {1}, [](const Tensor& p) { return p.view({}); }, {}, [](const Index&) { return Index{0}; });
  // A contiguous row block of a narrowed tensor can be viewed.
  check_view(
      ctx, {4, 6},
      [](const Tensor& p) {
        return p.narrow(0, 1, 2).view({3, 4});
      },
      {3, 4},
      [](const Index& i) {
        return Index{1 + (4 * i[0] + i[1]) / 6, (4 * i[0] + i[1]) % 6};
      });
  // Splitting or adding size-1 dims of a transposed tensor needs no copy either.
  check_view(
      ctx, {2, 3},
      [](const Tensor& p) {
        return p.t().view({3, 2, 1});
      },
      {3, 2, 1},
      [](const Index& i) {
        return Index{i[1], i[0]};
      });
  check_view(
      ctx, {4, 6},
      [](const Tensor& p) {
        return p.t().view({2, 3, 4});
      },
      {2, 3, 4},
      [](const Index& i) {
        return Index{i[2], 3 * i[0] + i[1]};
      });
}

TEST_CASE("views: view of a transposed tensor that needs a copy is invalid_argument and reshape copies then") {
  TestContext ctx;
  const Tensor p = make_parent(ctx, {2, 3});
  const Tensor t = p.t();
  std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "view", t.view({6}));
  CHECK_THAT(msg, Catch::Contains("[3, 2]") && Catch::Contains("[6]"));
  FORGE_REQUIRE_ERROR(invalid_argument, "view", p.narrow(1, 1, 2).view({4}));
  const auto before = ctx.stats().outstanding;
  const Tensor r = t.reshape({6});
  CHECK(ctx.stats().outstanding == before + 1);  // a copy
  CHECK(r.buffer().get() != p.buffer().get());
  CHECK(r.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  const Tensor r2 = p.narrow(1, 1, 2).reshape({2, 2});  // packed rows? no: stride 3 between rows of 2
  CHECK(r2.to_vector<double>() == std::vector<double>{1, 2, 4, 5});
  // reshape of packed memory is still a view.
  CHECK(p.reshape({3, 2}).buffer().get() == p.buffer().get());
}

TEST_CASE("views: reshape and view reject sizes that do not fit the element count") {
  TestContext ctx;
  const Tensor p = make_parent(ctx, {3, 4});
  const auto before = ctx.stats().outstanding;
  std::string msg = FORGE_REQUIRE_ERROR(shape, "reshape", p.reshape({5}));
  CHECK_THAT(msg, Catch::Contains("[5]") && Catch::Contains("12"));
  FORGE_REQUIRE_ERROR(shape, "reshape", p.reshape({-1, 5}));
  FORGE_REQUIRE_ERROR(shape, "view", p.view({2, 2, 2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "reshape", p.reshape({-1, -1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "view", p.view({-2, -6}));
  FORGE_REQUIRE_ERROR(shape, "reshape", ctx.zeros({0, 4}).reshape({0, -1}));  // -1 is ambiguous with 0 elements
  CHECK(ctx.stats().outstanding == before);
  CHECK(ctx.zeros({0, 4}).reshape({2, 0, 3}).shape() == Shape{2, 0, 3});
}

TEST_CASE("views: broadcast_to and expand give zero strides and refuse writes") {
  TestContext ctx;
  check_view(
      ctx, {3, 1},
      [](const Tensor& p) {
        return p.broadcast_to({2, 3, 4});
      },
      {2, 3, 4},
      [](const Index& i) {
        return Index{i[1], 0};
      },
      /*writable=*/false);
  check_view(
      ctx, {3, 1},
      [](const Tensor& p) {
        return p.expand({2, -1, 4});
      },
      {2, 3, 4},
      [](const Index& i) {
        return Index{i[1], 0};
      },
      /*writable=*/false);
  check_view(
      ctx, {1}, [](const Tensor& p) { return p.expand({5}); }, {5}, [](const Index&) { return Index{0}; },
      /*writable=*/false);
  // Broadcasting to the same shape changes nothing and stays writable.
  check_view(
      ctx, {2, 3},
      [](const Tensor& p) {
        return p.expand({-1, -1});
      },
      {2, 3}, [](const Index& i) { return i; });
  const Tensor p = make_parent(ctx, {3, 1});
  CHECK(p.broadcast_to({2, 3, 4}).strides() == Strides{0, 1, 0});
  CHECK(ctx.full({}, 2.0).expand({2, 2}).strides() == Strides{0, 0});
  // Broadcasting a zero-size dimension from 1.
  CHECK(p.expand({3, 0}).numel() == 0);
}

TEST_CASE("views: broadcast_to and expand reject shapes that do not broadcast") {
  TestContext ctx;
  const Tensor p = make_parent(ctx, {3, 1});
  const auto before = ctx.stats().outstanding;
  std::string msg = FORGE_REQUIRE_ERROR(shape, "broadcast_to", p.broadcast_to({2, 4}));
  CHECK_THAT(msg, Catch::Contains("[3, 1]") && Catch::Contains("[2, 4]"));
  FORGE_REQUIRE_ERROR(shape, "broadcast_to", p.broadcast_to({4}));  // fewer dims
  FORGE_REQUIRE_ERROR(shape, "expand", p.expand({3}));
  // expand names itself, not the broadcast_to it is built on.
  FORGE_REQUIRE_ERROR(shape, "expand", p.expand({6, 2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "expand", p.expand({-1, 3, 2}));  // -1 for a new leading dim
  FORGE_REQUIRE_ERROR(invalid_argument, "broadcast_to", p.broadcast_to({-2, 3, 1}));
  CHECK(ctx.stats().outstanding == before);
}

TEST_CASE("views: narrow selects a range of one dimension, negative start counts from the end") {
  TestContext ctx;
  check_view(
      ctx, {5, 9}, [](const Tensor& p) { return p.narrow(1, 2, 4); }, {5, 4},
      [](const Index& i) {
        return Index{i[0], i[1] + 2};
      });
  check_view(
      ctx, {5, 9}, [](const Tensor& p) { return p.narrow(0, -2, 2); }, {2, 9},
      [](const Index& i) {
        return Index{i[0] + 3, i[1]};
      });
  check_view(
      ctx, {5, 9}, [](const Tensor& p) { return p.narrow(-1, 0, 9); }, {5, 9}, [](const Index& i) { return i; });
  check_view(
      ctx, {5, 9}, [](const Tensor& p) { return p.narrow(1, 9, 0); }, {5, 0}, [](const Index& i) { return i; });
  check_view(
      ctx, {5, 9}, [](const Tensor& p) { return p.t().narrow(0, 1, 3).narrow(1, 2, 2); }, {3, 2},
      [](const Index& i) {
        return Index{i[1] + 2, i[0] + 1};
      });
}

TEST_CASE("views: narrow past the end is out_of_range and shows the values") {
  TestContext ctx;
  const Tensor p = make_parent(ctx, {5, 9});
  const auto before = ctx.stats().outstanding;
  std::string msg = FORGE_REQUIRE_ERROR(out_of_range, "narrow", p.narrow(1, 7, 4));
  CHECK(msg == "[narrow] start 7 + length 4 exceeds dimension 1 of size 9");
  msg = FORGE_REQUIRE_ERROR(out_of_range, "narrow", p.narrow(1, 10, 0));  // start past the end
  CHECK_THAT(msg, Catch::Contains("10") && Catch::Contains("9"));
  FORGE_REQUIRE_ERROR(out_of_range, "narrow", p.narrow(0, -6, 1));
  msg = FORGE_REQUIRE_ERROR(invalid_argument, "narrow", p.narrow(1, 2, -1));  // negative length
  CHECK_THAT(msg, Catch::Contains("-1"));
  FORGE_REQUIRE_ERROR(out_of_range, "narrow", p.narrow(2, 0, 1));  // no dim 2
  FORGE_REQUIRE_ERROR(invalid_argument, "narrow", ctx.full({}, 1.0).narrow(0, 0, 1));
  CHECK(ctx.stats().outstanding == before);
}

TEST_CASE("views: slice takes every step-th element and clamps its bounds like Python") {
  TestContext ctx;
  check_view(
      ctx, {10}, [](const Tensor& p) { return p.slice(0, 1, 8, 3); }, {3},
      [](const Index& i) { return Index{1 + 3 * i[0]}; });
  check_view(
      ctx, {10}, [](const Tensor& p) { return p.slice(0, -3, 100); }, {3},
      [](const Index& i) { return Index{7 + i[0]}; });
  check_view(
      ctx, {10}, [](const Tensor& p) { return p.slice(0, -100, 3); }, {3}, [](const Index& i) { return Index{i[0]}; });
  check_view(
      ctx, {10}, [](const Tensor& p) { return p.slice(0, 5, 2); }, {0}, [](const Index& i) { return i; });
  check_view(
      ctx, {10}, [](const Tensor& p) { return p.slice(0, 0, 10, 4); }, {3},
      [](const Index& i) { return Index{4 * i[0]}; });
  check_view(
      ctx, {4, 6}, [](const Tensor& p) { return p.slice(1, 1, 6, 2); }, {4, 3},
      [](const Index& i) {
        return Index{i[0], 1 + 2 * i[1]};
      });
  check_view(
      ctx, {4, 6}, [](const Tensor& p) { return p.slice(0, 1, -1).slice(1, 0, 6, 5); }, {2, 2},
      [](const Index& i) {
        return Index{1 + i[0], 5 * i[1]};
      });
  const Tensor p = make_parent(ctx, {10});
  FORGE_REQUIRE_ERROR(invalid_argument, "slice", p.slice(0, 0, 5, 0));
  FORGE_REQUIRE_ERROR(invalid_argument, "slice", p.slice(0, 0, 5, -1));
  FORGE_REQUIRE_ERROR(out_of_range, "slice", p.slice(1, 0, 5));
}

TEST_CASE("views: select drops a dimension, negative index counts from the end") {
  TestContext ctx;
  check_view(
      ctx, {3, 4, 5}, [](const Tensor& p) { return p.select(1, -1); }, {3, 5},
      [](const Index& i) {
        return Index{i[0], 3, i[1]};
      });
  check_view(
      ctx, {3, 4, 5}, [](const Tensor& p) { return p.select(0, 2); }, {4, 5},
      [](const Index& i) {
        return Index{2, i[0], i[1]};
      });
  check_view(
      ctx, {3, 4, 5}, [](const Tensor& p) { return p.select(-1, 0).select(0, 1); }, {4},
      [](const Index& i) {
        return Index{1, i[0], 0};
      });
  check_view(
      ctx, {4}, [](const Tensor& p) { return p.select(0, 3); }, {}, [](const Index&) { return Index{3}; });
  const Tensor p = make_parent(ctx, {3, 4});
  std::string msg = FORGE_REQUIRE_ERROR(out_of_range, "select", p.select(0, 3));
  CHECK_THAT(msg, Catch::Contains("3"));
  FORGE_REQUIRE_ERROR(out_of_range, "select", p.select(0, -4));
  FORGE_REQUIRE_ERROR(out_of_range, "select", p.select(2, 0));
  FORGE_REQUIRE_ERROR(invalid_argument, "select", ctx.full({}, 1.0).select(0, 0));
}

TEST_CASE("views: permute reorders dimensions and rejects repeated or missing dims") {
  TestContext ctx;
  check_view(
      ctx, {2, 3, 4},
      [](const Tensor& p) {
        return p.permute({2, 0, 1});
      },
      {4, 2, 3},
      [](const Index& i) {
        return Index{i[1], i[2], i[0]};
      });
  check_view(
      ctx, {2, 3, 4},
      [](const Tensor& p) {
        return p.permute({-1, 0, -2});
      },
      {4, 2, 3},
      [](const Index& i) {
        return Index{i[1], i[2], i[0]};
      });
  check_view(
      ctx, {2, 3, 4},
      [](const Tensor& p) {
        return p.permute({0, 1, 2});
      },
      {2, 3, 4}, [](const Index& i) { return i; });
  const Tensor p = make_parent(ctx, {2, 3, 4});
  std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "permute", p.permute({0, 0, 1}));
  CHECK_THAT(msg, Catch::Contains("0"));
  FORGE_REQUIRE_ERROR(invalid_argument, "permute", p.permute({0, 1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "permute", p.permute({0, 1, 2, 3}));
  FORGE_REQUIRE_ERROR(out_of_range, "permute", p.permute({0, 1, 3}));
}

TEST_CASE("views: transpose swaps two dimensions and t() transposes rank <= 2") {
  TestContext ctx;
  check_view(
      ctx, {2, 3, 4}, [](const Tensor& p) { return p.transpose(0, 2); }, {4, 3, 2},
      [](const Index& i) {
        return Index{i[2], i[1], i[0]};
      });
  check_view(
      ctx, {2, 3, 4}, [](const Tensor& p) { return p.transpose(-1, 1); }, {2, 4, 3},
      [](const Index& i) {
        return Index{i[0], i[2], i[1]};
      });
  check_view(
      ctx, {2, 3}, [](const Tensor& p) { return p.t(); }, {3, 2},
      [](const Index& i) {
        return Index{i[1], i[0]};
      });
  check_view(
      ctx, {5}, [](const Tensor& p) { return p.t(); }, {5}, [](const Index& i) { return i; });
  check_view(
      ctx, {2, 3}, [](const Tensor& p) { return p.t().t(); }, {2, 3}, [](const Index& i) { return i; });
  const Tensor p = make_parent(ctx, {2, 3, 4});
  FORGE_REQUIRE_ERROR(invalid_argument, "t", p.t());
  FORGE_REQUIRE_ERROR(out_of_range, "transpose", p.transpose(0, 3));
}

TEST_CASE("views: squeeze drops size-1 dims (all of them or one) and other dims stay") {
  TestContext ctx;
  check_view(
      ctx, {1, 3, 1, 2}, [](const Tensor& p) { return p.squeeze(); }, {3, 2},
      [](const Index& i) {
        return Index{0, i[0], 0, i[1]};
      });
  check_view(
      ctx, {1, 3, 1, 2}, [](const Tensor& p) { return p.squeeze(2); }, {1, 3, 2},
      [](const Index& i) {
        return Index{0, i[1], 0, i[2]};
      });
  check_view(
      ctx, {1, 3, 1, 2}, [](const Tensor& p) { return p.squeeze(-4); }, {3, 1, 2},
      [](const Index& i) {
        return Index{0, i[0], 0, i[2]};
      });
  check_view(
      ctx, {1, 3, 1, 2}, [](const Tensor& p) { return p.squeeze(1); }, {1, 3, 1, 2}, [](const Index& i) { return i; });
  check_view(
      ctx, {1, 1}, [](const Tensor& p) { return p.squeeze(); }, {},
      [](const Index&) {
        return Index{0, 0};
      });
  const Tensor p = make_parent(ctx, {1, 3});
  FORGE_REQUIRE_ERROR(out_of_range, "squeeze", p.squeeze(2));
}

TEST_CASE("views: unsqueeze inserts a size-1 dim anywhere, including at the end and by a negative dim") {
  TestContext ctx;
  check_view(
      ctx, {2, 3}, [](const Tensor& p) { return p.unsqueeze(0); }, {1, 2, 3},
      [](const Index& i) {
        return Index{i[1], i[2]};
      });
  check_view(
      ctx, {2, 3}, [](const Tensor& p) { return p.unsqueeze(1); }, {2, 1, 3},
      [](const Index& i) {
        return Index{i[0], i[2]};
      });
  check_view(
      ctx, {2, 3}, [](const Tensor& p) { return p.unsqueeze(2); }, {2, 3, 1},
      [](const Index& i) {
        return Index{i[0], i[1]};
      });
  check_view(
      ctx, {2, 3}, [](const Tensor& p) { return p.unsqueeze(-1); }, {2, 3, 1},
      [](const Index& i) {
        return Index{i[0], i[1]};
      });
  check_view(
      ctx, {2, 3}, [](const Tensor& p) { return p.unsqueeze(-3); }, {1, 2, 3},
      [](const Index& i) {
        return Index{i[1], i[2]};
      });
  check_view(
      ctx, {2, 3}, [](const Tensor& p) { return p.t().unsqueeze(1); }, {3, 1, 2},
      [](const Index& i) {
        return Index{i[2], i[0]};
      });
  check_view(
      ctx, {1}, [](const Tensor& p) { return p.view({}).unsqueeze(0); }, {1}, [](const Index&) { return Index{0}; });
  // The new dimension's stride keeps the result viewable and contiguous where the input was.
  const Tensor p = make_parent(ctx, {2, 3});
  CHECK(p.unsqueeze(2).is_contiguous());
  CHECK(p.unsqueeze(0).view({6}).buffer().get() == p.buffer().get());
  FORGE_REQUIRE_ERROR(out_of_range, "unsqueeze", p.unsqueeze(3));
  FORGE_REQUIRE_ERROR(out_of_range, "unsqueeze", p.unsqueeze(-4));
  const Tensor r8 = ctx.zeros({1, 1, 1, 1, 1, 1, 1, 2});
  std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "unsqueeze", r8.unsqueeze(0));
  CHECK_THAT(msg, Catch::Contains("8"));
  FORGE_REQUIRE_ERROR(invalid_argument, "unsqueeze", r8.unsqueeze(-1));
}

TEST_CASE("views: flatten merges a range of dims, viewing packed memory and copying otherwise") {
  TestContext ctx;
  check_view(
      ctx, {2, 3, 4}, [](const Tensor& p) { return p.flatten(); }, {24},
      [](const Index& i) {
        return Index{i[0] / 12, (i[0] / 4) % 3, i[0] % 4};
      });
  check_view(
      ctx, {2, 3, 4}, [](const Tensor& p) { return p.flatten(1); }, {2, 12},
      [](const Index& i) {
        return Index{i[0], i[1] / 4, i[1] % 4};
      });
  check_view(
      ctx, {2, 3, 4}, [](const Tensor& p) { return p.flatten(0, 1); }, {6, 4},
      [](const Index& i) {
        return Index{i[0] / 3, i[0] % 3, i[1]};
      });
  check_view(
      ctx, {2, 3, 4}, [](const Tensor& p) { return p.flatten(1, 1); }, {2, 3, 4}, [](const Index& i) { return i; });
  check_view(
      ctx, {1}, [](const Tensor& p) { return p.view({}).flatten(); }, {1}, [](const Index&) { return Index{0}; });
  const Tensor p = make_parent(ctx, {2, 3});
  const Tensor f = p.t().flatten();  // needs a copy
  CHECK(f.buffer().get() != p.buffer().get());
  CHECK(f.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  FORGE_REQUIRE_ERROR(invalid_argument, "flatten", ctx.zeros({2, 3, 4}).flatten(2, 1));
  FORGE_REQUIRE_ERROR(out_of_range, "flatten", ctx.zeros({2, 3, 4}).flatten(0, 3));
}

TEST_CASE("views: views of views compose and keep the buffer alive to the last one") {
  TestContext ctx;
  const auto before = ctx.stats().outstanding;
  Tensor v;
  {
    const Tensor p = make_parent(ctx, {4, 5, 6});
    v = p.permute({2, 0, 1}).narrow(0, 1, 4).slice(2, 0, 5, 2).select(1, 3).unsqueeze(0);  // [1, 4, 3]
  }
  REQUIRE(v.shape() == Shape{1, 4, 3});
  CHECK(ctx.stats().outstanding == before + 1);
  std::vector<double> expected;
  for (std::int64_t a = 0; a < 4; ++a)
    for (std::int64_t c = 0; c < 3; ++c) expected.push_back(static_cast<double>(3 * 30 + (2 * c) * 6 + (a + 1)));
  CHECK(v.to_vector<double>() == expected);
  v = Tensor();
  CHECK(ctx.stats().outstanding == before);
}

// ============================================================================
// writes through expanded views
// ============================================================================

TEST_CASE("views: a write through an expanded view is invalid_argument and changes nothing") {
  TestContext ctx;
  Tensor base = ctx.from_vector<float>({1, 2, 3}, {3, 1});
  Tensor e = base.expand({3, 4});
  const std::uint32_t version = base.version();
  std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "fill_", e.fill_(0));
  CHECK_THAT(msg, Catch::Contains("expanded"));
  FORGE_REQUIRE_ERROR(invalid_argument, "zero_", e.zero_());
  FORGE_REQUIRE_ERROR(invalid_argument, "copy_", e.copy_(ctx.ones({3, 4})));
  const Tensor a = ctx.ones({3, 4}), b = ctx.ones({3, 4});
  const auto before_ops = ctx.stats().outstanding;
  FORGE_REQUIRE_ERROR(invalid_argument, "add_into", forge::add_into(e, a, b));
  FORGE_REQUIRE_ERROR(invalid_argument, "mul_into", forge::mul_into(e, a, b));
  FORGE_REQUIRE_ERROR(invalid_argument, "relu_into", forge::relu_into(e, a));
  // In place onto itself is refused too: the expanded tensor is an input and the output.
  FORGE_REQUIRE_ERROR(invalid_argument, "add_into", forge::add_into(e, e, e));
  CHECK(ctx.stats().outstanding == before_ops);
  CHECK(base.to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(base.version() == version);
  // Expanded along a leading new dimension, or from a 0-d tensor.
  Tensor s = ctx.full({}, 5.0);
  Tensor se = s.expand({4});
  FORGE_REQUIRE_ERROR(invalid_argument, "fill_", se.fill_(1));
  Tensor lead = ctx.zeros({3}).broadcast_to({2, 3});
  FORGE_REQUIRE_ERROR(invalid_argument, "copy_", lead.copy_(ctx.ones({3})));
  CHECK(s.item<float>() == 5.0f);
}

// ============================================================================
// element counts that overflow int64
// ============================================================================

TEST_CASE("views: expanding to a shape whose element count overflows int64 is refused") {
  TestContext ctx;
  const Tensor one = ctx.ones({1});
  const std::int64_t huge = std::int64_t{1} << 40;
  // A view is free, but one whose numel() cannot be represented makes every later use undefined.
  const auto before = ctx.stats().outstanding;
  FORGE_REQUIRE_ERROR(invalid_argument, "expand", (void)one.expand({huge, huge}));
  CHECK(ctx.stats().outstanding == before);
}

// Last in this file (and so last in a default run): with the sanitizers on, a
// signed overflow here aborts the process instead of failing one case.
TEST_CASE("views: reshape and view to a shape whose element count overflows int64 are errors") {
  TestContext ctx;
  const Tensor t = ctx.zeros({6});
  const std::int64_t huge = std::int64_t{1} << 32;
  const auto before = ctx.stats().outstanding;
  // A mismatch (shape) or an overflow (invalid_argument) are both fair; reaching the overflow is not.
  auto refused = [&](const std::string& op, auto&& fn) {
    try {
      fn();
      FAIL_CHECK("no error from [" << op << "]");
    } catch (const forge::Error& e) {
      INFO("message: " << e.what());
      CHECK((e.code() == ErrorCode::shape || e.code() == ErrorCode::invalid_argument));
      CHECK(std::string(e.what()).rfind("[" + op + "]", 0) == 0);
    }
  };
  refused("reshape", [&] { (void)t.reshape({huge, huge}); });
  refused("view", [&] { (void)t.view({huge, huge, -1}); });
  refused("reshape", [&] { (void)t.reshape({huge, huge, 0, -1}); });
  CHECK(ctx.stats().outstanding == before);
}
