// Every public op family, run as a table of cases on the reference target and
// on each target under test (backend_ops.h): outputs and input gradients must
// agree. Also: a wrong kernel planted in a copy of the cpu table is caught and
// named, and an entry planted as unsupported fails as ErrorCode::device.

#include "backend_ops.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <set>

#include "backend/backend.h"
#include "backend/device_runtime.h"
#include "backend/kernels.h"
#include "forge/forge.h"
#include "support.h"

namespace {

using forge::DType;
using forge::Scalar;
using forge::Shape;
using forge::Tensor;
using forge_test::TestContext;
using forge_test::backend_ops::Env;
using forge_test::backend_ops::Exactness;
using forge_test::backend_ops::integers;
using forge_test::backend_ops::kClose;
using forge_test::backend_ops::kExact;
using forge_test::backend_ops::kExactOutputs;
using forge_test::backend_ops::kExactThreads;
using forge_test::backend_ops::normal;
using forge_test::backend_ops::OpCase;
using forge_test::backend_ops::Spec;
using forge_test::backend_ops::Target;
using forge_test::backend_ops::uniform;
namespace bo = forge_test::backend_ops;

const std::vector<DType> kAll = {DType::f32, DType::f64, DType::f16,     DType::bf16, DType::i32,
                                 DType::i64, DType::u8,  DType::boolean, DType::i8};
const std::vector<DType> kNumeric = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                     DType::i32, DType::i64, DType::u8,  DType::i8};
const std::vector<DType> kSigned = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::i8};
const std::vector<DType> kFloat = {DType::f32, DType::f64, DType::f16, DType::bf16};
const std::vector<DType> kF32F64 = {DType::f32, DType::f64};

// A reduction's sums depend on how the range is split (docs/OPS.md,
// "Reductions"); its gradient is the upstream weight broadcast.
constexpr Exactness kReduced{false, false, true, true};
// Rows computed whole by one thread; the backward's weight and bias
// gradients add over rows.
constexpr Exactness kRowsExactThreads{true, false, false, false};

// ---- elementwise ----

using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;
using Unary = std::function<Tensor(const Tensor&)>;

// Broadcasting, an expanded operand, a zero-size and a 0-d operand, and
// a 43200-element output above the kernels' grain.
void binary_shapes(Env& e, const Binary& op, const Spec& sa, const Spec& sb) {
  {
    const Tensor a = e.leaf({48, 900}, sa), b = e.leaf({900}, sb);
    e.emit("[48, 900] with [900]", {op(a, b)});
  }
  {
    const Tensor a = e.leaf({7, 1, 5}, sa), b = e.leaf({1, 6, 5}, sb);
    e.emit("[7, 1, 5] with [1, 6, 5]", {op(a, b)});
  }
  {
    Spec expanded = sa;
    expanded.expand_from = Shape{1, 700};
    const Tensor a = e.leaf({60, 700}, expanded), b = e.leaf({60, 700}, sb);
    e.emit("[60, 700] expanded from [1, 700] with [60, 700]", {op(a, b)});
  }
  {
    const Tensor a = e.leaf({0, 5}, sa), b = e.leaf({5}, sb);
    e.emit("[0, 5] with [5]", {op(a, b)});
  }
  {
    const Tensor a = e.leaf({}, sa), b = e.leaf({3, 4}, sb);
    e.emit("[] with [3, 4]", {op(a, b)});
  }
}

void unary_shapes(Env& e, const Unary& op, const Spec& s) {
  {
    const Tensor x = e.leaf({60, 700}, s);
    e.emit("[60, 700]", {op(x)});
  }
  {
    Spec expanded = s;
    expanded.expand_from = Shape{1, 300};
    const Tensor x = e.leaf({120, 300}, expanded);
    e.emit("[120, 300] expanded from [1, 300]", {op(x)});
  }
  {
    const Tensor x = e.leaf({5, 9}, s);
    e.emit("[5, 9]", {op(x)});
  }
  {
    const Tensor x = e.leaf({7, 0, 3}, s);
    e.emit("[7, 0, 3]", {op(x)});
  }
  {
    const Tensor x = e.leaf({}, s);
    e.emit("[]", {op(x)});
  }
}

void add_elementwise_cases(std::vector<OpCase>& cases) {
  struct BinaryOp {
    const char* name;
    std::vector<DType> dtypes;
    Binary op;
    Unary scalar_form;  // the op with a Scalar operand, when it has one
    Spec a, b;
  };
  const std::vector<BinaryOp> binaries = {
      {"add",
       kAll,
       [](const Tensor& a, const Tensor& b) { return a + b; },
       [](const Tensor& x) { return x + 1; },
       {},
       {}},
      {"sub",
       kNumeric,
       [](const Tensor& a, const Tensor& b) { return a - b; },
       [](const Tensor& x) { return 1 - x; },
       {},
       {}},
      {"mul",
       kAll,
       [](const Tensor& a, const Tensor& b) { return a * b; },
       [](const Tensor& x) { return x * 2; },
       {},
       {}},
      {"div",
       kAll,
       [](const Tensor& a, const Tensor& b) { return a / b; },
       [](const Tensor& x) { return x / 2; },
       {},
       {.values = uniform(0.5, 3)}},
      {"pow",
       kNumeric,
       [](const Tensor& a, const Tensor& b) { return forge::pow(a, b); },
       [](const Tensor& x) { return forge::pow(x, 2); },
       {.values = uniform(0.5, 2.5)},
       {.values = uniform(-2, 2.5)}},
      {"maximum", kAll, [](const Tensor& a, const Tensor& b) { return forge::maximum(a, b); }, {}, {}, {}},
      {"minimum", kAll, [](const Tensor& a, const Tensor& b) { return forge::minimum(a, b); }, {}, {}, {}},
  };
  for (const BinaryOp& b : binaries) {
    cases.push_back({b.name, "elementwise.binary", b.dtypes, true, kExactOutputs, 1, [b](Env& e) {
                       binary_shapes(e, b.op, b.a, b.b);
                       if (!b.scalar_form) return;
                       const Tensor x = e.leaf({60, 700}, b.a);
                       e.emit("[60, 700] with a scalar", {b.scalar_form(x)});
                     }});
  }
  // Ties are common among small integers, in every dtype.
  const std::vector<std::pair<const char*, Binary>> predicates = {
      {"eq", [](const Tensor& a, const Tensor& b) { return a == b; }},
      {"ne", [](const Tensor& a, const Tensor& b) { return a != b; }},
      {"lt", [](const Tensor& a, const Tensor& b) { return a < b; }},
      {"le", [](const Tensor& a, const Tensor& b) { return a <= b; }},
      {"gt", [](const Tensor& a, const Tensor& b) { return a > b; }},
      {"ge", [](const Tensor& a, const Tensor& b) { return a >= b; }},
      {"logical_and", [](const Tensor& a, const Tensor& b) { return forge::logical_and(a, b); }},
      {"logical_or", [](const Tensor& a, const Tensor& b) { return forge::logical_or(a, b); }},
  };
  for (const auto& [name, op] : predicates) {
    cases.push_back({name, "elementwise.binary", kAll, false, kExact, 1, [op](Env& e) {
                       const Spec small{.values = integers(-3, 3)};
                       binary_shapes(e, op, small, small);
                     }});
  }
  cases.push_back({"logical_not", "elementwise.unary", kAll, false, kExact, 1, [](Env& e) {
                     unary_shapes(e, [](const Tensor& x) { return forge::logical_not(x); },
                                  {.values = integers(-1, 1)});
                   }});

  struct UnaryOp {
    const char* name;
    std::vector<DType> dtypes;
    Unary op;
    Spec spec;
  };
  const Spec positive{.values = uniform(0.1, 4)};
  const std::vector<UnaryOp> unaries = {
      {"neg", kSigned, [](const Tensor& x) { return -x; }, {}},
      {"abs", kSigned, [](const Tensor& x) { return forge::abs(x); }, {}},
      {"sign", kSigned, [](const Tensor& x) { return forge::sign(x); }, {}},
      {"square", kSigned, [](const Tensor& x) { return forge::square(x); }, {}},
      {"relu", kSigned, [](const Tensor& x) { return forge::relu(x); }, {}},
      {"exp", kFloat, [](const Tensor& x) { return forge::exp(x); }, {}},
      {"expm1", kFloat, [](const Tensor& x) { return forge::expm1(x); }, {}},
      {"log", kFloat, [](const Tensor& x) { return forge::log(x); }, positive},
      {"log1p", kFloat, [](const Tensor& x) { return forge::log1p(x); }, {.values = uniform(-0.5, 4)}},
      {"sqrt", kFloat, [](const Tensor& x) { return forge::sqrt(x); }, positive},
      {"rsqrt", kFloat, [](const Tensor& x) { return forge::rsqrt(x); }, positive},
      {"reciprocal", kFloat, [](const Tensor& x) { return forge::reciprocal(x); }, positive},
      {"sin", kFloat, [](const Tensor& x) { return forge::sin(x); }, {}},
      {"cos", kFloat, [](const Tensor& x) { return forge::cos(x); }, {}},
      {"tanh", kFloat, [](const Tensor& x) { return forge::tanh(x); }, {}},
      {"sigmoid", kFloat, [](const Tensor& x) { return forge::sigmoid(x); }, {}},
      {"leaky_relu", kFloat, [](const Tensor& x) { return forge::leaky_relu(x, 0.1); }, {}},
      {"gelu", kFloat, [](const Tensor& x) { return forge::gelu(x); }, {}},
      {"gelu_tanh", kFloat, [](const Tensor& x) { return forge::gelu(x, forge::GeluApproximation::tanh); }, {}},
      {"silu", kFloat, [](const Tensor& x) { return forge::silu(x); }, {}},
      {"softplus", kFloat, [](const Tensor& x) { return forge::softplus(x, 2.0, 5.0); }, {}},
      {"elu", kFloat, [](const Tensor& x) { return forge::elu(x, 0.7); }, {}},
      {"erf", kFloat, [](const Tensor& x) { return forge::erf(x); }, {}},
  };
  for (const UnaryOp& u : unaries) {
    cases.push_back(
        {u.name, "elementwise.unary", u.dtypes, true, kExact, 1, [u](Env& e) { unary_shapes(e, u.op, u.spec); }});
  }

  cases.push_back({"where", "elementwise.where", kAll, true, kExactOutputs, 1, [](Env& e) {
                     {
                       const Tensor c = e.mask({48, 1}), a = e.leaf({48, 900}), b = e.leaf({900});
                       e.emit("cond [48, 1], [48, 900], [900]", {forge::where(c, a, b)});
                     }
                     {
                       Spec expanded{.expand_from = Shape{1, 700}};
                       const Tensor c = e.mask({60, 700}), a = e.leaf({60, 700}, expanded);
                       e.emit("[60, 700] expanded from [1, 700], scalar other", {forge::where(c, a, 1)});
                     }
                     {
                       const Tensor c = e.mask({0, 3}), a = e.leaf({0, 3}), b = e.leaf({3});
                       e.emit("[0, 3]", {forge::where(c, a, b)});
                     }
                   }});
  cases.push_back({"clamp", "elementwise.clamp", kNumeric, true, kExact, 1, [](Env& e) {
                     const bool fl = forge::is_floating(e.dtype());
                     const Scalar lo = fl ? Scalar(-0.5) : Scalar(1), hi = fl ? Scalar(0.8) : Scalar(6);
                     unary_shapes(e, [&](const Tensor& x) { return forge::clamp(x, lo, hi); }, {});
                     const Tensor x = e.leaf({60, 700});
                     e.emit("[60, 700] min only", {forge::clamp(x, lo, std::nullopt)});
                     const Tensor y = e.leaf({60, 700});
                     e.emit("[60, 700] max only", {forge::clamp(y, std::nullopt, hi)});
                   }});
}

// ---- reductions ----

using Reduce = std::function<std::vector<Tensor>(const Tensor&)>;

struct Reduction {
  const char* label;
  Shape shape;
  Reduce op;
};

void reduce_shapes(Env& e, const std::vector<Reduction>& rs, const Spec& spec = {}) {
  for (const Reduction& r : rs) {
    const Tensor x = e.leaf(r.shape, spec);
    e.emit(r.label, r.op(x));
  }
}

// Few outputs over a long range (split into partials above 2 x 32768
// elements), many outputs (split over outputs), inner and outer reductions,
// two dims at once, zero-size inputs.
std::vector<Reduction> sum_like(const std::function<Tensor(const Tensor&, const forge::DimList&, bool)>& f) {
  const auto r = [f](const forge::DimList& dims, bool keepdim) {
    return [f, dims, keepdim](const Tensor& x) { return std::vector<Tensor>{f(x, dims, keepdim)}; };
  };
  return {
      {"all of [250, 400]", {250, 400}, r({}, false)},
      {"dim 0 of [250, 400]", {250, 400}, r(0, false)},
      {"dim 1 of [250, 400], keepdim", {250, 400}, r(1, true)},
      {"dim 0 of [20000, 5]", {20000, 5}, r(0, false)},
      {"dims {0, 2} of [20, 30, 40]", {20, 30, 40}, r({0, 2}, false)},
      {"dim 1 of [0, 7]", {0, 7}, r(1, false)},
  };
}

void add_reduce_cases(std::vector<OpCase>& cases) {
  cases.push_back(
      {"sum", "reduce.reduce", kAll, true, kReduced, 1, [](Env& e) {
         reduce_shapes(e,
                       sum_like([](const Tensor& x, const forge::DimList& d, bool k) { return forge::sum(x, d, k); }));
         reduce_shapes(
             e, {{"dim 0 of [0, 7]", {0, 7}, [](const Tensor& x) { return std::vector<Tensor>{forge::sum(x, 0)}; }}});
         const Tensor x = e.leaf({250, 400}, {.expand_from = Shape{250, 1}});
         e.emit("all of [250, 400] expanded from [250, 1]", {forge::sum(x)});
       }});
  cases.push_back({"mean", "reduce.reduce", kFloat, true, kReduced, 1, [](Env& e) {
                     reduce_shapes(e, sum_like([](const Tensor& x, const forge::DimList& d, bool k) {
                                     return forge::mean(x, d, k);
                                   }));
                   }});
  cases.push_back(
      {"prod", "reduce.reduce", kNumeric, true, kClose, 1, [](Env& e) {
         const Spec s{.values = forge::is_floating(e.dtype()) ? uniform(0.7, 1.4) : integers(1, 2)};
         reduce_shapes(
             e,
             {
                 {"dim 1 of [1200, 40]",
                  {1200, 40},
                  [](const Tensor& x) { return std::vector<Tensor>{forge::prod(x, 1)}; }},
                 {"dim 0 of [40, 1200]",
                  {40, 1200},
                  [](const Tensor& x) { return std::vector<Tensor>{forge::prod(x, 0)}; }},
                 {"all of [6, 7]", {6, 7}, [](const Tensor& x) { return std::vector<Tensor>{forge::prod(x)}; }},
                 {"dim 0 of [0, 4]", {0, 4}, [](const Tensor& x) { return std::vector<Tensor>{forge::prod(x, 0)}; }},
             },
             s);
       }});
  // The largest element and its first index are the same whatever the order.
  cases.push_back({"amax", "reduce.reduce", kNumeric, true, kExact, 1, [](Env& e) {
                     reduce_shapes(e, sum_like([](const Tensor& x, const forge::DimList& d, bool k) {
                                     return forge::amax(x, d, k);
                                   }));
                   }});
  cases.push_back({"amin", "reduce.reduce", kNumeric, true, kExact, 1, [](Env& e) {
                     reduce_shapes(e, sum_like([](const Tensor& x, const forge::DimList& d, bool k) {
                                     return forge::amin(x, d, k);
                                   }));
                   }});
  const auto with_indices = [](bool largest) {
    return [largest](Env& e) {
      const auto f = [largest](std::int64_t dim, bool keep) {
        return [=](const Tensor& x) {
          const forge::ValuesIndices r = largest ? forge::max(x, dim, keep) : forge::min(x, dim, keep);
          return std::vector<Tensor>{r.values, r.indices};
        };
      };
      reduce_shapes(e, {{"dim 1 of [250, 400]", {250, 400}, f(1, false)},
                        {"dim 0 of [250, 400], keepdim", {250, 400}, f(0, true)},
                        {"dim 1 of [0, 7]", {0, 7}, f(1, false)}});
      const Tensor x = e.leaf({250, 400});
      e.emit("all of [250, 400]", {largest ? forge::max(x) : forge::min(x)});
    };
  };
  cases.push_back({"max along a dim", "reduce.arg_reduce", kNumeric, true, kExact, 1, with_indices(true)});
  cases.push_back({"min along a dim", "reduce.arg_reduce", kNumeric, true, kExact, 1, with_indices(false)});
  const auto arg = [](bool largest) {
    return [largest](Env& e) {
      const auto f = [largest](std::optional<std::int64_t> dim, bool keep) {
        return [=](const Tensor& x) {
          if (!dim) return std::vector<Tensor>{largest ? forge::argmax(x) : forge::argmin(x)};
          return std::vector<Tensor>{largest ? forge::argmax(x, *dim, keep) : forge::argmin(x, *dim, keep)};
        };
      };
      // Small integers: ties everywhere, the first index must win.
      reduce_shapes(e,
                    {{"all of [250, 400]", {250, 400}, f(std::nullopt, false)},
                     {"dim 1 of [250, 400]", {250, 400}, f(1, false)},
                     {"dim 0 of [250, 400], keepdim", {250, 400}, f(0, true)},
                     {"dim 1 of [0, 7]", {0, 7}, f(1, false)}},
                    {.values = integers(-3, 3)});
    };
  };
  cases.push_back({"argmax", "reduce.arg_reduce", kNumeric, false, kExact, 1, arg(true)});
  cases.push_back({"argmin", "reduce.arg_reduce", kNumeric, false, kExact, 1, arg(false)});
  cases.push_back({"var and std", "reduce.moments", kFloat, true, kClose, 1, [](Env& e) {
                     reduce_shapes(e, {
                                          {"var of all of [250, 400]",
                                           {250, 400},
                                           [](const Tensor& x) { return std::vector<Tensor>{forge::var(x)}; }},
                                          {"var dim 1 of [250, 400]",
                                           {250, 400},
                                           [](const Tensor& x) { return std::vector<Tensor>{forge::var(x, 1)}; }},
                                          {"std dim 0 of [250, 400], correction 0",
                                           {250, 400},
                                           [](const Tensor& x) { return std::vector<Tensor>{forge::std(x, 0, 0)}; }},
                                          {"std dims {0, 2} of [20, 30, 40], keepdim",
                                           {20, 30, 40},
                                           [](const Tensor& x) {
                                             return std::vector<Tensor>{forge::std(x, {0, 2}, 1, true)};
                                           }},
                                      });
                   }});
  cases.push_back({"logsumexp", "reduce.reduce", kFloat, true, kClose, 1, [](Env& e) {
                     reduce_shapes(e, {
                                          {"dim 1 of [250, 400]",
                                           {250, 400},
                                           [](const Tensor& x) { return std::vector<Tensor>{forge::logsumexp(x, 1)}; }},
                                          {"dims {0, 1} of [250, 400]",
                                           {250, 400},
                                           [](const Tensor& x) {
                                             return std::vector<Tensor>{forge::logsumexp(x, {0, 1})};
                                           }},
                                          {"dim 0 of [3, 0]",
                                           {3, 0},
                                           [](const Tensor& x) { return std::vector<Tensor>{forge::logsumexp(x, 0)}; }},
                                      });
                   }});
  cases.push_back({"norm", "reduce.reduce", kFloat, true, kClose, 1, [](Env& e) {
                     reduce_shapes(
                         e, {
                                {"p 2 of all of [250, 400]",
                                 {250, 400},
                                 [](const Tensor& x) { return std::vector<Tensor>{forge::norm(x)}; }},
                                {"p 1 dim 1 of [250, 400]",
                                 {250, 400},
                                 [](const Tensor& x) { return std::vector<Tensor>{forge::norm(x, 1, 1)}; }},
                                {"p 2 dim 0 of [250, 400], keepdim",
                                 {250, 400},
                                 [](const Tensor& x) { return std::vector<Tensor>{forge::norm(x, 2, 0, true)}; }},
                            });
                   }});
  for (const bool every : {true, false}) {
    cases.push_back({every ? "all" : "any", "reduce.reduce", kAll, false, kExact, 1, [every](Env& e) {
                       const auto f = [every](const Tensor& x, const forge::DimList& d, bool k) {
                         return every ? forge::all(x, d, k) : forge::any(x, d, k);
                       };
                       // Mostly nonzero, so that `all` is not false everywhere.
                       reduce_shapes(e, sum_like(f), {.values = integers(0, 60)});
                       // Mostly zero, so that `any` is not true everywhere.
                       reduce_shapes(e, sum_like(f), {.values = integers(-60, 1)});
                     }});
  }
  // Float cumsum accumulates in f64 along each line (docs/OPS.md).
  cases.push_back(
      {"cumsum", "reduce.scan", kAll, true, kExact, 1, [](Env& e) {
         reduce_shapes(
             e,
             {
                 {"dim 1 of [250, 400]",
                  {250, 400},
                  [](const Tensor& x) { return std::vector<Tensor>{forge::cumsum(x, 1)}; }},
                 {"dim 0 of [250, 400]",
                  {250, 400},
                  [](const Tensor& x) { return std::vector<Tensor>{forge::cumsum(x, 0)}; }},
                 {"dim 1 of [4, 0]", {4, 0}, [](const Tensor& x) { return std::vector<Tensor>{forge::cumsum(x, 1)}; }},
                 {"dim 0 of []", {}, [](const Tensor& x) { return std::vector<Tensor>{forge::cumsum(x, 0)}; }},
             });
       }});
}

// ---- normalizations and losses ----

void add_nn_cases(std::vector<OpCase>& cases) {
  for (const bool log : {false, true}) {
    cases.push_back({log ? "log_softmax" : "softmax", "nn.softmax", kFloat, true, kExactThreads, 1, [log](Env& e) {
                       const auto f = [log](std::int64_t dim) {
                         return [=](const Tensor& x) {
                           return std::vector<Tensor>{log ? forge::log_softmax(x, dim) : forge::softmax(x, dim)};
                         };
                       };
                       reduce_shapes(e, {{"dim -1 of [64, 1000]", {64, 1000}, f(-1)},
                                         {"dim 1 of [40, 30, 50]", {40, 30, 50}, f(1)},
                                         {"dim 0 of [700, 60]", {700, 60}, f(0)},
                                         {"dim 1 of [0, 5]", {0, 5}, f(1)}});
                     }});
  }
  cases.push_back({"layer_norm", "nn.layer_norm", kFloat, true, kRowsExactThreads, 1, [](Env& e) {
                     {
                       const Tensor x = e.leaf({96, 512}), w = e.leaf({512}), b = e.leaf({512});
                       e.emit("[96, 512] over [512], weight and bias", {forge::layer_norm(x, {512}, w, b)});
                     }
                     {
                       const Tensor x = e.leaf({4, 10, 6, 8}), w = e.leaf({6, 8});
                       e.emit("[4, 10, 6, 8] over [6, 8], weight", {forge::layer_norm(x, {6, 8}, w)});
                     }
                     {
                       const Tensor x = e.leaf({20, 7});
                       e.emit("[20, 7] over [7]", {forge::layer_norm(x, {7})});
                     }
                     {
                       const Tensor x = e.leaf({3, 0, 5}), w = e.leaf({5});
                       e.emit("[3, 0, 5] over [5]", {forge::layer_norm(x, {5}, w)});
                     }
                   }});
  cases.push_back({"rms_norm", "nn.rms_norm", kFloat, true, kRowsExactThreads, 1, [](Env& e) {
                     {
                       const Tensor x = e.leaf({96, 512}), w = e.leaf({512});
                       e.emit("[96, 512] over [512], weight", {forge::rms_norm(x, {512}, w)});
                     }
                     {
                       const Tensor x = e.leaf({4, 10, 6, 8}), w = e.leaf({6, 8});
                       e.emit("[4, 10, 6, 8] over [6, 8], weight, eps 1e-3", {forge::rms_norm(x, {6, 8}, w, 1e-3)});
                     }
                     {
                       const Tensor x = e.leaf({20, 7});
                       e.emit("[20, 7] over [7]", {forge::rms_norm(x, {7})});
                     }
                     {
                       const Tensor x = e.leaf({3, 0, 5});
                       e.emit("[3, 0, 5] over [5]", {forge::rms_norm(x, {5})});
                     }
                   }});
  // 1 and 4 threads give identical bits (docs/OPS.md); a strided input is
  // another path.
  cases.push_back({"cross_entropy", "nn.cross_entropy", kFloat, true, kExactThreads, 1, [](Env& e) {
                     {
                       const Tensor x = e.leaf({512, 100}), t = e.index({512}, 0, 99);
                       e.emit("[512, 100], ignore_index 7, mean", {forge::cross_entropy(x, t, {.ignore_index = 7})});
                     }
                     {
                       const Tensor x = e.leaf({512, 100}), t = e.index({512}, 0, 99);
                       e.emit(
                           "[512, 100], label smoothing 0.1, sum",
                           {forge::cross_entropy(x, t, {.reduction = forge::Reduction::sum, .label_smoothing = 0.1})});
                     }
                     {
                       const Tensor x = e.leaf({8, 10, 30}), t = e.index({8, 30}, 0, 9);
                       e.emit("[8, 10, 30], none", {forge::cross_entropy(x, t, {.reduction = forge::Reduction::none})});
                     }
                     {
                       const Tensor x = e.leaf({50}), t = e.index({}, 0, 49);
                       e.emit("[50], mean", {forge::cross_entropy(x, t)});
                     }
                   }});
  cases.push_back({"nll_loss", "nn.nll_loss", kFloat, true, kClose, 1, [](Env& e) {
                     for (const auto r : {forge::Reduction::mean, forge::Reduction::sum, forge::Reduction::none}) {
                       const Tensor x = e.leaf({512, 100}), t = e.index({512}, 0, 99);
                       e.emit("[512, 100], ignore_index 3, reduction " + std::to_string(static_cast<int>(r)),
                              {forge::nll_loss(x, t, r, 3)});
                     }
                     const Tensor x = e.leaf({8, 10, 30}), t = e.index({8, 30}, 0, 9);
                     e.emit("[8, 10, 30], mean", {forge::nll_loss(x, t)});
                   }});
  cases.push_back({"mse_loss", "nn.mse_loss", kFloat, true, kClose, 1, [](Env& e) {
                     for (const auto r : {forge::Reduction::mean, forge::Reduction::sum, forge::Reduction::none}) {
                       const Tensor a = e.leaf({300, 200}), b = e.leaf({200});
                       e.emit("[300, 200] with [200], reduction " + std::to_string(static_cast<int>(r)),
                              {forge::mse_loss(a, b, r)});
                     }
                   }});
  // Each element's keep or drop comes from its index and the context's seed,
  // whatever the layout or thread count (docs/OPS.md).
  cases.push_back({"dropout", "nn.dropout", kFloat, true, kExact, 1, [](Env& e) {
                     {
                       const Tensor x = e.leaf({200, 300});
                       e.emit("[200, 300], p 0.3", {forge::dropout(x, 0.3)});
                     }
                     {
                       const Tensor x = e.leaf({7, 9});
                       e.emit("[7, 9], p 0.5", {forge::dropout(x, 0.5)});
                     }
                     {
                       const Tensor x = e.leaf({0, 4});
                       e.emit("[0, 4], p 0.5", {forge::dropout(x, 0.5)});
                     }
                   }});
}

// ---- convolution and pooling ----

void add_conv_cases(std::vector<OpCase>& cases) {
  cases.push_back(
      {"conv2d", "conv.conv2d", kFloat, true, kClose, 2, [](Env& e) {
         {
           const Tensor x = e.leaf({4, 8, 32, 32}), w = e.leaf({16, 8, 3, 3}), b = e.leaf({16});
           e.emit("[4, 8, 32, 32] * [16, 8, 3, 3], bias, padding 1", {forge::conv2d(x, w, b, {.padding = {1, 1}})});
         }
         {
           const Tensor x = e.leaf({2, 6, 17, 19}), w = e.leaf({4, 3, 3, 2});
           e.emit("[2, 6, 17, 19] * [4, 3, 3, 2], groups 2, stride (2, 1), padding (1, 0), dilation (1, 2)",
                  {forge::conv2d(x, w, {}, {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2})});
         }
         {
           const Tensor x = e.leaf({2, 16, 24, 24}), w = e.leaf({8, 16, 1, 1}), b = e.leaf({8});
           e.emit("[2, 16, 24, 24] * [8, 16, 1, 1], bias", {forge::conv2d(x, w, b)});
         }
         {
           const Tensor x = e.leaf({3, 10, 10}), w = e.leaf({5, 3, 3, 3});
           e.emit("[3, 10, 10] * [5, 3, 3, 3]", {forge::conv2d(x, w)});
         }
         {
           const Tensor x = e.leaf({0, 3, 8, 8}), w = e.leaf({4, 3, 3, 3});
           e.emit("[0, 3, 8, 8] * [4, 3, 3, 3]", {forge::conv2d(x, w)});
         }
       }});
  // A window's maximum, and where its gradient goes, do not depend on order;
  // an average adds its window in a fixed order.
  for (const bool max : {true, false}) {
    cases.push_back({max ? "max_pool2d" : "avg_pool2d", max ? "conv.max_pool2d" : "conv.avg_pool2d", kFloat, true,
                     kExact, 1, [max](Env& e) {
                       const auto pool = [max](const Tensor& x, const forge::Pool2dOptions& o) {
                         return max ? forge::max_pool2d(x, o) : forge::avg_pool2d(x, o);
                       };
                       {
                         const Tensor x = e.leaf({8, 16, 32, 32});
                         e.emit("[8, 16, 32, 32], kernel 3, stride 2, padding 1",
                                {pool(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})});
                       }
                       {
                         const Tensor x = e.leaf({2, 3, 17, 15});
                         forge::Pool2dOptions o{.kernel = {3, 2}, .stride = {2, 2}, .ceil_mode = true};
                         if (max) {
                           o.dilation = {2, 1};
                         } else {
                           o.count_include_pad = false;
                           o.padding = {1, 1};
                         }
                         e.emit("[2, 3, 17, 15], kernel (3, 2), ceil mode", {pool(x, o)});
                       }
                       {
                         const Tensor x = e.leaf({4, 9, 9});
                         e.emit("[4, 9, 9], kernel 2", {pool(x, {})});
                       }
                       {
                         const Tensor x = e.leaf({0, 2, 6, 6});
                         e.emit("[0, 2, 6, 6], kernel 2", {pool(x, {})});
                       }
                     }});
  }
}

// ---- linear algebra and attention ----

void add_linalg_cases(std::vector<OpCase>& cases) {
  cases.push_back({"matmul", "linalg.matmul", kFloat, true, kClose, 2, [](Env& e) {
                     const auto mm = [&](const char* label, const Shape& sa, const Shape& sb) {
                       const Tensor a = e.leaf(sa), b = e.leaf(sb);
                       e.emit(label, {forge::matmul(a, b)});
                     };
                     // 2.9 M multiply-adds: split over the threads.
                     mm("[160, 96] x [96, 192]", {160, 96}, {96, 192});
                     mm("[3, 1, 20, 30] x [4, 30, 10]", {3, 1, 20, 30}, {4, 30, 10});
                     mm("[5, 40, 64] x [64, 48]", {5, 40, 64}, {64, 48});
                     mm("[30] x [30, 7]", {30}, {30, 7});
                     mm("[7, 30] x [30]", {7, 30}, {30});
                     mm("[5, 0] x [0, 4]", {5, 0}, {0, 4});
                     mm("[0, 6] x [6, 3]", {0, 6}, {6, 3});
                   }});
  // int8 products (a u8 or i8, b i8, i32 out): exact on every target.
  cases.push_back({"int8 matmul", "linalg.matmul", {DType::u8, DType::i8}, false, kExact, 2, [](Env& e) {
                     const double lo = e.dtype() == DType::u8 ? 0 : -128;
                     const auto mm = [&](const char* label, const Shape& sa, const Shape& sb) {
                       const Tensor a = e.input(sa, {.values = bo::integers(lo, lo + 255)});
                       const Tensor b = e.input(sb, {.values = bo::integers(-128, 127), .dtype = DType::i8});
                       e.emit(label, {forge::matmul(a, b)});
                     };
                     mm("[160, 96] x [96, 192]", {160, 96}, {96, 192});
                     mm("[3, 1, 20, 30] x [4, 30, 10]", {3, 1, 20, 30}, {4, 30, 10});
                     mm("[8, 33, 70] x [8, 70, 40]", {8, 33, 70}, {8, 70, 40});
                     mm("[30] x [30, 7]", {30}, {30, 7});
                     mm("[7, 30] x [30]", {7, 30}, {30});
                     mm("[0, 6] x [6, 3]", {0, 6}, {6, 3});
                   }});
  cases.push_back({"bmm", "linalg.matmul", kFloat, true, kClose, 2, [](Env& e) {
                     {
                       // Batches over the threads.
                       const Tensor a = e.leaf({8, 64, 64}), b = e.leaf({8, 64, 80});
                       e.emit("[8, 64, 64] x [8, 64, 80]", {forge::bmm(a, b)});
                     }
                     {
                       const Tensor a = e.leaf({3, 5, 0}), b = e.leaf({3, 0, 2});
                       e.emit("[3, 5, 0] x [3, 0, 2]", {forge::bmm(a, b)});
                     }
                   }});
  cases.push_back({"linear", "linalg.matmul", kFloat, true, kClose, 2, [](Env& e) {
                     {
                       const Tensor x = e.leaf({4, 50, 64}), w = e.leaf({96, 64}), b = e.leaf({96});
                       e.emit("[4, 50, 64] by [96, 64], bias", {forge::linear(x, w, b)});
                     }
                     {
                       const Tensor x = e.leaf({10, 64}), w = e.leaf({12, 64});
                       e.emit("[10, 64] by [12, 64]", {forge::linear(x, w)});
                     }
                   }});
  cases.push_back({"addmm", "linalg.matmul", kFloat, true, kClose, 2, [](Env& e) {
                     {
                       const Tensor c = e.leaf({192}), a = e.leaf({160, 96}), b = e.leaf({96, 192});
                       e.emit("[192] + [160, 96] x [96, 192], beta 0.5, alpha 2", {forge::addmm(c, a, b, 0.5, 2)});
                     }
                     {
                       const Tensor c = e.leaf({9, 1}), a = e.leaf({9, 4}), b = e.leaf({4, 6});
                       e.emit("[9, 1] + [9, 4] x [4, 6]", {forge::addmm(c, a, b)});
                     }
                   }});
  cases.push_back({"outer and dot", "linalg.matmul", kFloat, true, kClose, 2, [](Env& e) {
                     {
                       const Tensor a = e.leaf({300}), b = e.leaf({200});
                       e.emit("outer [300] x [200]", {forge::outer(a, b)});
                     }
                     {
                       const Tensor a = e.leaf({5000}), b = e.leaf({5000});
                       e.emit("dot [5000] x [5000]", {forge::dot(a, b)});
                     }
                   }});
  cases.push_back(
      {"scaled_dot_product_attention", "linalg.attention", kFloat, true, kClose, 2, [](Env& e) {
         using forge::scaled_dot_product_attention;
         {
           const Tensor q = e.leaf({2, 4, 64, 32}), k = e.leaf({2, 4, 80, 32}), v = e.leaf({2, 4, 80, 24});
           e.emit("q [2, 4, 64, 32], k [2, 4, 80, 32], v [2, 4, 80, 24]", {scaled_dot_product_attention(q, k, v)});
         }
         {
           const Tensor q = e.leaf({2, 3, 40, 16}), k = e.leaf({2, 3, 40, 16}), v = e.leaf({2, 3, 40, 16});
           e.emit("causal, [2, 3, 40, 16], scale 0.3", {scaled_dot_product_attention(q, k, v, {}, true, 0.3)});
         }
         {
           const Tensor q = e.leaf({2, 3, 20, 8}), k = e.leaf({2, 3, 30, 8}), v = e.leaf({2, 3, 30, 8});
           Tensor m = e.mask({20, 30});
           // Keep the first key, so that no row is fully masked (NaN).
           m = forge::logical_or(m, e.ctx().arange(30, DType::f32).broadcast_to({20, 30}) == 0);
           e.emit("bool mask [20, 30]", {scaled_dot_product_attention(q, k, v, m)});
         }
         {
           const Tensor q = e.leaf({2, 3, 20, 8}), k = e.leaf({2, 3, 30, 8}), v = e.leaf({2, 3, 30, 8});
           const Tensor m = e.input({1, 1, 20, 30});
           e.emit("float mask [1, 1, 20, 30]", {scaled_dot_product_attention(q, k, v, m)});
         }
       }});
}

// ---- indexing, masks, shape ops ----

void add_indexing_cases(std::vector<OpCase>& cases) {
  // Gradients of gathers add duplicates, as scatter_add does: in order.
  cases.push_back({"gather", "indexing.gather", kAll, true, kExact, 1, [](Env& e) {
                     {
                       const Tensor x = e.leaf({300, 200}), i = e.index({300, 150}, 0, 199);
                       e.emit("dim 1 of [300, 200] by [300, 150]", {forge::gather(x, 1, i)});
                     }
                     {
                       const Tensor x = e.leaf({300, 200}), i = e.index({100, 200}, 0, 299);
                       e.emit("dim 0 of [300, 200] by [100, 200]", {forge::gather(x, 0, i)});
                     }
                     {
                       const Tensor x = e.leaf({5, 4}), i = e.index({0, 4}, 0, 4);
                       e.emit("dim 0 of [5, 4] by [0, 4]", {forge::gather(x, 0, i)});
                     }
                   }});
  // Deterministic: lines along dim in parallel, each in order (docs/OPS.md).
  cases.push_back({"scatter_add", "indexing.scatter_add", kNumeric, true, kExact, 1, [](Env& e) {
                     {
                       const Tensor x = e.leaf({300, 200}), i = e.index({300, 150}, 0, 199), s = e.leaf({300, 150});
                       e.emit("dim 1 of [300, 200], [300, 150] sources", {forge::scatter_add(x, 1, i, s)});
                     }
                     {
                       const Tensor x = e.leaf({300, 200}), i = e.index({600, 200}, 0, 299), s = e.leaf({600, 200});
                       e.emit("dim 0 of [300, 200], [600, 200] sources", {forge::scatter_add(x, 0, i, s)});
                     }
                     {
                       const Tensor x = e.leaf({5, 4}), i = e.index({0, 4}, 0, 4), s = e.leaf({0, 4});
                       e.emit("dim 0 of [5, 4], no sources", {forge::scatter_add(x, 0, i, s)});
                     }
                   }});
  cases.push_back({"index_select", "indexing.index_select", kAll, true, kExact, 1, [](Env& e) {
                     {
                       const Tensor x = e.leaf({500, 120}), i = e.index({400}, 0, 499);
                       e.emit("dim 0 of [500, 120] by [400]", {forge::index_select(x, 0, i)});
                     }
                     {
                       const Tensor x = e.leaf({500, 120}), i = e.index({77}, 0, 119);
                       e.emit("dim 1 of [500, 120] by [77]", {forge::index_select(x, 1, i)});
                     }
                     {
                       const Tensor x = e.leaf({5, 4}), i = e.index({0}, 0, 4);
                       e.emit("dim 0 of [5, 4] by [0]", {forge::index_select(x, 0, i)});
                     }
                   }});
  cases.push_back({"embedding", "indexing.embedding", kFloat, true, kExact, 1, [](Env& e) {
                     {
                       const Tensor w = e.leaf({1000, 64}), i = e.index({32, 20}, 0, 49);
                       e.emit("[1000, 64] by [32, 20], padding_idx 3", {forge::embedding(w, i, 3)});
                     }
                     {
                       const Tensor w = e.leaf({50, 1100}), i = e.index({40}, 0, 49);
                       e.emit("[50, 1100] by [40]", {forge::embedding(w, i)});
                     }
                     {
                       const Tensor w = e.leaf({10, 3}), i = e.index({0, 2}, 0, 9);
                       e.emit("[10, 3] by [0, 2]", {forge::embedding(w, i)});
                     }
                   }});
  cases.push_back({"one_hot", "indexing.one_hot", {DType::i64, DType::i32}, false, kExact, 1, [](Env& e) {
                     const Spec classes{.values = integers(0, 9)};
                     e.emit("[5000], 10 classes", {forge::one_hot(e.input({5000}, classes), 10)});
                     e.emit("[4, 25], classes from the data", {forge::one_hot(e.input({4, 25}, classes))});
                     e.emit("[0], 3 classes", {forge::one_hot(e.input({0}, classes), 3)});
                   }});
  cases.push_back({"masked_fill", "indexing.masked_fill", kAll, true, kExact, 1, [](Env& e) {
                     {
                       const Tensor x = e.leaf({60, 700}), m = e.mask({60, 1});
                       e.emit("[60, 700] by [60, 1]", {forge::masked_fill(x, m, 1)});
                     }
                     {
                       const Tensor x = e.leaf({60, 700}), m = e.mask({60, 700});
                       e.emit("[60, 700] by [60, 700]", {forge::masked_fill(x, m, 0)});
                     }
                     {
                       const Tensor x = e.leaf({0, 3}), m = e.mask({3});
                       e.emit("[0, 3] by [3]", {forge::masked_fill(x, m, 1)});
                     }
                   }});
  for (const bool upper : {false, true}) {
    cases.push_back({upper ? "triu" : "tril", "indexing.triangle", kAll, true, kExact, 1, [upper](Env& e) {
                       for (const std::int64_t diagonal : {0, -3, 5}) {
                         const Tensor x = e.leaf({4, 120, 130});
                         e.emit("[4, 120, 130], diagonal " + std::to_string(diagonal),
                                {upper ? forge::triu(x, diagonal) : forge::tril(x, diagonal)});
                       }
                       const Tensor x = e.leaf({0, 3});
                       e.emit("[0, 3]", {upper ? forge::triu(x) : forge::tril(x)});
                     }});
  }
  // The arena calls: outputs only the call can size, read back before the
  // arena's next call rewinds it.
  cases.push_back({"masked_select and nonzero", "indexing.compact_rows", kAll, false, kExact, 1, [](Env& e) {
                     forge::Arena arena(e.ctx());
                     for (const Shape& s : {Shape{60, 700}, Shape{7, 3}, Shape{0, 4}}) {
                       const Tensor x = e.input(s), m = e.mask(s);
                       e.emit(s.str() + " masked_select", {forge::masked_select(x, m, &arena)});
                       e.emit(s.str() + " nonzero", {forge::nonzero(x, &arena)});
                     }
                   }});
  cases.push_back({"rows_where and the per-row calls", "indexing.flag_rows", kAll, false, kExact, 1, [](Env& e) {
                     forge::Arena arena(e.ctx());
                     for (const Shape& s : {Shape{300, 140}, Shape{5, 3}, Shape{0, 2}}) {
                       const Tensor x = e.input(s);
                       const Tensor row_mask = e.mask({s[0]});
                       const forge::RowsView rows = forge::rows_where(x, row_mask, &arena);
                       e.emit(s.str() + " rows_where", {rows.tensor()});
                       const Tensor m = e.mask(s);
                       const forge::TapeView tape = forge::nonzero_per_row(m, &arena);
                       e.emit(s.str() + " nonzero_per_row", {tape.values(), tape.offsets()});
                     }
                     const Tensor x = e.input({6, 50, 40});
                     const forge::RowsTapeView per_item = forge::rows_where_per_item(x, e.mask({6, 50}), &arena);
                     e.emit("[6, 50, 40] rows_where_per_item", {per_item.rows(), per_item.offsets()});
                   }});
  cases.push_back({"cat", "indexing.cat", kAll, true, kExact, 1, [](Env& e) {
                     {
                       const Tensor a = e.leaf({30, 700}), b = e.leaf({20, 700});
                       e.emit("[30, 700] and [20, 700] along 0", {forge::cat({a, b}, 0)});
                     }
                     {
                       const Tensor a = e.leaf({30, 5}), b = e.leaf({30, 0}), c = e.leaf({30, 9});
                       e.emit("[30, 5], [30, 0] and [30, 9] along 1", {forge::cat({a, b, c}, 1)});
                     }
                     {
                       const Tensor a = e.leaf({0}), b = e.leaf({6});
                       e.emit("[0] and [6]", {forge::cat({a, b})});
                     }
                   }});
  cases.push_back({"stack", "indexing.stack", kAll, true, kExact, 1, [](Env& e) {
                     {
                       const Tensor a = e.leaf({40, 700}), b = e.leaf({40, 700});
                       e.emit("two [40, 700] along 1", {forge::stack({a, b}, 1)});
                     }
                     {
                       const Tensor a = e.leaf({0, 3}), b = e.leaf({0, 3});
                       e.emit("two [0, 3] along 0", {forge::stack({a, b}, 0)});
                     }
                   }});
  cases.push_back({"flip", "indexing.flip", kAll, true, kExact, 1, [](Env& e) {
                     const auto flip = [&](const char* label, const Shape& s, const forge::Dims& dims) {
                       const Tensor x = e.leaf(s);
                       e.emit(label, {forge::flip(x, dims)});
                     };
                     flip("[60, 700] along 0", {60, 700}, {0});
                     flip("[60, 700] along 0 and 1", {60, 700}, {0, 1});
                     flip("[3, 0, 4] along 1", {3, 0, 4}, {1});
                     flip("[5] along 0", {5}, {0});
                   }});
  cases.push_back({"pad", "indexing.pad", kAll, true, kExact, 1, [](Env& e) {
                     using forge::PadMode;
                     const auto pad = [&](const char* label, const Shape& s, const forge::Dims& amounts, PadMode mode) {
                       const Tensor x = e.leaf(s);
                       e.emit(label, {forge::pad(x, amounts, mode, 1)});
                     };
                     pad("constant [4, 3, 60, 70] by (2, 3, 1, 1)", {4, 3, 60, 70}, {2, 3, 1, 1}, PadMode::constant);
                     pad("reflect [4, 3, 60, 70] by (2, 3, 1, 1)", {4, 3, 60, 70}, {2, 3, 1, 1}, PadMode::reflect);
                     pad("replicate [2, 3, 40] by (5, 4)", {2, 3, 40}, {5, 4}, PadMode::replicate);
                     pad("constant [6, 9] by (-1, -2, 1, 0)", {6, 9}, {-1, -2, 1, 0}, PadMode::constant);
                     pad("constant [0, 4] by (1, 1)", {0, 4}, {1, 1}, PadMode::constant);
                   }});
  cases.push_back({"repeat", "indexing.repeat", kAll, true, kExact, 1, [](Env& e) {
                     const auto repeat = [&](const char* label, const Shape& s, const forge::Dims& r) {
                       const Tensor x = e.leaf(s);
                       e.emit(label, {forge::repeat(x, r)});
                     };
                     repeat("[30, 40] by (2, 3, 4)", {30, 40}, {2, 3, 4});
                     repeat("[5] by (3, 2)", {5}, {3, 2});
                     repeat("[0, 2] by (2, 2)", {0, 2}, {2, 2});
                   }});
}

// ---- copies, casts, fills ----

void add_copy_cases(std::vector<OpCase>& cases) {
  cases.push_back({"to", "copy.copy_cast", kAll, true, kExact, 1, [](Env& e) {
                     for (const Shape& s : {Shape{200, 300}, Shape{0, 3}, Shape{}}) {
                       for (const DType to : kAll) {
                         if (to == e.dtype()) continue;
                         const Tensor x = e.leaf(s, {.values = uniform(-300, 300)});
                         e.emit(s.str() + " to " + std::string(forge::dtype_name(to)), {x.to(to)});
                       }
                     }
                   }});
  cases.push_back({"clone", "copy.copy_cast", kAll, true, kExact, 1, [](Env& e) {
                     for (const Shape& s : {Shape{60, 700}, Shape{0, 4}, Shape{}}) {
                       const Tensor x = e.leaf(s);
                       e.emit(s.str() + " clone", {x.clone()});
                       const Tensor y = e.leaf(s);
                       e.emit(s.str() + " contiguous", {y.contiguous()});
                     }
                   }});
  cases.push_back({"copy_", "copy.copy_cast", kAll, false, kExact, 1, [](Env& e) {
                     {
                       Tensor dst = e.input({60, 700});
                       dst.copy_(e.input({700}, {.dtype = DType::f64}));
                       e.emit("[700] f64 into [60, 700]", {dst});
                     }
                     {
                       Tensor dst = e.input({60, 700});
                       dst.copy_(e.input({60, 700}));
                       e.emit("[60, 700] into [60, 700]", {dst});
                     }
                     {
                       Tensor dst = e.input({0, 7});
                       dst.copy_(e.input({7}, {.dtype = DType::i32}));
                       e.emit("[7] i32 into [0, 7]", {dst});
                     }
                   }});
  cases.push_back(
      {"fill", "copy.fill", kAll, false, kExact, 1, [](Env& e) {
         {
           Tensor dst = e.input({60, 700});
           dst.fill_(1);
           e.emit("fill_ [60, 700] with 1", {dst});
           dst.zero_();
           e.emit("zero_ [60, 700]", {dst});
         }
         e.emit("full [300, 200] of 1", {e.ctx().full({300, 200}, 1, e.dtype())});
         e.emit("zeros and ones [5, 0]", {e.ctx().zeros({5, 0}, e.dtype()), e.ctx().ones({5, 0}, e.dtype())});
         e.emit("ones []", {e.ctx().ones({}, e.dtype())});
       }});
}

// Sequences and draws: the generator is reseeded per case, so the draws too
// must be the same on every target.
void add_generate_cases(std::vector<OpCase>& cases) {
  cases.push_back({"arange, linspace, eye, rand, randn", "copy.generate", kAll, false, kExact, 1, [](Env& e) {
                     forge::ExecContext& ctx = e.ctx();
                     const DType d = e.dtype();
                     if (d != DType::boolean) {
                       e.emit("arange(0, 40000)",
                              {ctx.arange(0, 40000, 1, d == DType::u8 || d == DType::i8 ? DType::i64 : d)});
                       e.emit("arange(3, 100, 7)", {ctx.arange(3, 100, 7, d)});
                       e.emit("linspace(0, 90, 41)", {ctx.linspace(0, 90, 41, d)});
                     }
                     e.emit("eye(300, 200) and eye(0)", {ctx.eye(300, 200, d), ctx.eye(0, -1, d)});
                     if (forge::is_floating(d)) {
                       e.emit("rand [300, 200]", {ctx.rand({300, 200}, d)});
                       e.emit("randn [301, 3] and [0]", {ctx.randn({301, 3}, d), ctx.randn({0}, d)});
                     }
                   }});
}

// Integer draws: the generator is reseeded per case, as above.
void add_integer_draw_cases(std::vector<OpCase>& cases) {
  cases.push_back({"randint, randperm", "copy.generate", kAll, false, kExact, 1, [](Env& e) {
                     forge::ExecContext& ctx = e.ctx();
                     const DType d = e.dtype();
                     const bool narrow = d == DType::u8 || d == DType::bf16;
                     const std::int64_t low = d == DType::boolean || d == DType::u8 ? 0 : -5;
                     e.emit("randint [300, 200]", {ctx.randint(low, d == DType::boolean ? 2 : 6, {300, 200}, d)});
                     const std::int64_t n = d == DType::boolean ? 2 : d == DType::i8 ? 128 : narrow ? 200 : 1000;
                     e.emit("randperm", {ctx.randperm(n, d)});
                   }});
}

// ---- sorting, selection and sampling ----

void add_sort_cases(std::vector<OpCase>& cases) {
  // Small integers: ties everywhere, so the input order must decide.
  const Spec ties{.values = integers(-3, 3)};
  cases.push_back({"sort, argsort", "sort.sort", kAll, true, kExact, 1, [ties](Env& e) {
                     {
                       const Tensor x = e.leaf({40, 300}, ties);
                       const auto [v, i] = forge::sort(x, 1);
                       e.emit("dim 1 of [40, 300]", {v, i});
                     }
                     {
                       const Tensor x = e.leaf({300, 40}, ties);
                       const auto [v, i] = forge::sort(x, 0, true);
                       e.emit("dim 0 of [300, 40], descending", {v, i});
                     }
                     e.emit("argsort dim 1 of [7, 9]", {forge::argsort(e.input({7, 9}), 1, true)});
                     {
                       const Tensor x = e.leaf({5, 0});
                       const auto [v, i] = forge::sort(x, 1);
                       e.emit("dim 1 of [5, 0]", {v, i});
                     }
                   }});
  cases.push_back({"topk", "sort.topk", kAll, true, kExact, 1, [ties](Env& e) {
                     {
                       const Tensor x = e.leaf({8, 512}, ties);
                       const auto [v, i] = forge::topk(x, 5);
                       e.emit("5 of [8, 512]", {v, i});
                     }
                     {
                       const Tensor x = e.leaf({8, 512}, ties);
                       const auto [v, i] = forge::topk(x, 300, 1, false, false);
                       e.emit("smallest 300 of [8, 512], index order", {v, i});
                     }
                     {
                       const Tensor x = e.leaf({60, 7}, ties);
                       const auto [v, i] = forge::topk(x, 3, 0);
                       e.emit("3 along dim 0 of [60, 7]", {v, i});
                     }
                   }});
  cases.push_back({"searchsorted", "sort.searchsorted", kNumeric, false, kExact, 1, [](Env& e) {
                     const Tensor row = std::get<0>(forge::sort(e.input({50})));
                     const Tensor rows = std::get<0>(forge::sort(e.input({6, 50}), 1));
                     const Tensor values = e.input({6, 300});
                     e.emit("1-D sequence, left", {forge::searchsorted(row, values)});
                     e.emit("batched sequence, right, i32", {forge::searchsorted(rows, values, true, true)});
                   }});
  cases.push_back({"multinomial", "sort.multinomial", kFloat, false, kExact, 1, [](Env& e) {
                     const Tensor probs = e.input({8, 512}, {.values = uniform(0, 1)});
                     e.emit("1 of [8, 512]", {forge::multinomial(probs, 1, true)});
                     e.emit("40 of [8, 512] with replacement", {forge::multinomial(probs, 40, true)});
                     e.emit("40 of [8, 512] without replacement", {forge::multinomial(probs, 40, false)});
                   }});
}

// ---- optimizers ----

// Three parameters (one above the kernels' grain), three steps, fresh
// gradients before each (strided in the strided layout).
template <typename MakeOptimizer, typename State>
void optimizer_steps(Env& e, MakeOptimizer make, State state) {
  std::vector<Tensor> params = {e.param({250, 200}), e.param({30, 20}), e.param({7})};
  auto opt = make(params);
  for (int step = 0; step < 3; ++step) {
    for (Tensor& p : params) p.set_grad(e.input(p.shape()));
    opt.step();
    std::vector<Tensor> outs = params;
    for (std::size_t i = 0; i < params.size(); ++i)
      for (const Tensor& s : state(opt, i)) outs.push_back(s);
    e.emit("step " + std::to_string(step + 1), outs);
  }
}

void add_optim_cases(std::vector<OpCase>& cases) {
  using namespace forge::optim;
  cases.push_back({"SGD", "optim.sgd_step", kF32F64, false, kExact, 1, [](Env& e) {
                     optimizer_steps(
                         e, [](const std::vector<Tensor>& p) { return SGD(p, {.lr = 0.1}); },
                         [](const SGD&, std::size_t) { return std::vector<Tensor>{}; });
                   }});
  cases.push_back({"SGD with momentum", "optim.sgd_step", kF32F64, false, kExact, 1, [](Env& e) {
                     optimizer_steps(
                         e,
                         [](const std::vector<Tensor>& p) {
                           return SGD(p, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
                         },
                         [](const SGD& o, std::size_t i) { return std::vector<Tensor>{o.momentum_buffer(i)}; });
                   }});
  cases.push_back({"Adam", "optim.adam_step", kF32F64, false, kExact, 1, [](Env& e) {
                     optimizer_steps(
                         e, [](const std::vector<Tensor>& p) { return Adam(p, {.lr = 0.01, .weight_decay = 0.01}); },
                         [](const Adam& o, std::size_t i) {
                           return std::vector<Tensor>{o.exp_avg(i), o.exp_avg_sq(i)};
                         });
                   }});
  cases.push_back({"AdamW", "optim.adam_step", kF32F64, false, kExact, 1, [](Env& e) {
                     optimizer_steps(
                         e, [](const std::vector<Tensor>& p) { return AdamW(p, {.lr = 0.01, .weight_decay = 0.1}); },
                         [](const AdamW& o, std::size_t i) {
                           return std::vector<Tensor>{o.exp_avg(i), o.exp_avg_sq(i)};
                         });
                   }});
  // The norm adds fixed blocks in order: the same bits for any thread count.
  cases.push_back({"clip_grad_norm_", "optim.norm_power_sum", kF32F64, false, kExact, 1, [](Env& e) {
                     std::vector<Tensor> params = {e.param({250, 200}), e.param({30, 20}), e.param({7})};
                     for (const double p : {2.0, 1.0, kInfNorm, 3.0}) {
                       for (Tensor& q : params) q.set_grad(e.input(q.shape()));
                       const double norm = clip_grad_norm_(params, 10.0, p);
                       const std::string label = "norm type " + std::to_string(p);
                       e.emit_value(label, norm);
                       e.emit(label + ", clipped gradients", {params[0].grad(), params[1].grad(), params[2].grad()});
                     }
                   }});
}

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> c;
    add_elementwise_cases(c);
    add_reduce_cases(c);
    add_nn_cases(c);
    add_conv_cases(c);
    add_linalg_cases(c);
    add_indexing_cases(c);
    add_copy_cases(c);
    add_generate_cases(c);
    add_integer_draw_cases(c);
    add_optim_cases(c);
    add_sort_cases(c);
    return c;
  }();
  return cases;
}

std::string family_of(const OpCase& c) { return c.entry.substr(0, c.entry.find('.')); }

// Runs every case of `family` on the reference and on each target under
// test (or `targets`); every disagreement is a failed CHECK naming case,
// dtype and target.
void check_family(const std::string& family, const std::vector<Target>& targets = bo::targets_under_test()) {
  std::vector<const OpCase*> cases;
  for (const OpCase& c : op_cases())
    if (family_of(c) == family) cases.push_back(&c);
  CHECK(bo::check_cases(cases, targets) > 0);
}

}  // namespace

TEST_CASE("backend ops: the case table covers every kernel family", "[backend]") {
  std::set<std::string> families, names;
  for (const OpCase& c : op_cases()) {
    INFO(c.name);
    CHECK(names.insert(c.name).second);
    CHECK(!c.dtypes.empty());
    families.insert(family_of(c));
  }
  CHECK(families ==
        std::set<std::string>{"copy", "elementwise", "reduce", "nn", "conv", "linalg", "indexing", "optim", "sort"});
}

TEST_CASE("backend ops: elementwise cases agree across thread counts and layouts", "[backend]") {
  check_family("elementwise");
}
TEST_CASE("backend ops: reduce cases agree across thread counts and layouts", "[backend]") { check_family("reduce"); }
TEST_CASE("backend ops: nn cases agree across thread counts and layouts", "[backend]") { check_family("nn"); }
TEST_CASE("backend ops: conv cases agree across thread counts and layouts", "[backend]") { check_family("conv"); }
TEST_CASE("backend ops: linalg cases agree across thread counts and layouts", "[backend]") { check_family("linalg"); }
TEST_CASE("backend ops: indexing cases agree across thread counts and layouts", "[backend]") {
  check_family("indexing");
}
TEST_CASE("backend ops: copy cases agree across thread counts and layouts", "[backend]") { check_family("copy"); }
TEST_CASE("backend ops: optim cases agree across thread counts and layouts", "[backend]") { check_family("optim"); }
// The CUDA backend leaves the sort family empty (docs/OPS.md, "On the GPU"): the host's targets only.
TEST_CASE("backend ops: sort cases agree across thread counts and layouts", "[backend]") {
  check_family("sort", bo::host_targets());
}

namespace {

// A copy_cast that is right except for one element of every f32 result: the
// last one, off by one.
void copy_cast_off_by_one(forge::detail::DeviceRuntime& dev, const Shape& shape, const forge::backend::Operand& dst,
                          const forge::backend::Operand& src) {
  forge::backend::cpu_backend().kernels->copy.copy_cast.fn(dev, shape, dst, src);
  if (dst.dtype != DType::f32 || shape.numel() == 0) return;
  std::int64_t last = 0;
  for (int d = 0; d < shape.rank(); ++d) last += (shape[d] - 1) * dst.strides[d];
  reinterpret_cast<float*>(dst.data)[last] += 1.0f;
}

}  // namespace

TEST_CASE("backend ops: a wrong copy_cast planted on one context is caught and named, and agrees once restored",
          "[backend]") {
  const Target reference = bo::reference_target();
  const Target target = bo::host_targets().back();  // 4 threads, strided: compared within tolerance
  TestContext reference_ctx(forge_test::context_options(reference.threads));
  TestContext ctx(forge_test::context_options(target.threads));

  forge::backend::Kernels table = *forge::backend::cpu_backend().kernels;
  table.copy.copy_cast.fn = copy_cast_off_by_one;
  ctx.runtime().host().replace_kernels_for_testing(&table);

  std::map<std::pair<std::string, DType>, std::vector<std::string>> found;
  for (const OpCase& c : op_cases()) {
    if (c.entry != "copy.copy_cast") continue;
    for (const DType dtype : c.dtypes)
      found[{c.name, dtype}] = bo::compare_case(c, dtype, reference, reference_ctx, target, ctx);
  }
  // Every run that writes an f32 result through copy_cast disagrees, and says
  // where: the case, the dtype, the target, the output, the index, the values.
  for (const DType dtype : kAll) {
    if (dtype == DType::f32) continue;
    const auto& m = found.at({"to", dtype});
    REQUIRE(!m.empty());
    INFO(m.front());
    const std::string want = "to (copy.copy_cast) in " + std::string(forge::dtype_name(dtype)) + " on " + target.name;
    CHECK(m.front().rfind(want, 0) == 0);
    const bool names_f32_output = std::any_of(
        m.begin(), m.end(), [](const std::string& s) { return s.find("to f32: out 0") != std::string::npos; });
    CHECK(names_f32_output);
  }
  for (const char* name : {"clone", "copy_"}) {
    const auto& m = found.at({name, DType::f32});
    REQUIRE(!m.empty());
    INFO(m.front());
    CHECK(m.front().rfind(std::string(name) + " (copy.copy_cast) in f32", 0) == 0);
    CHECK(m.front().find("first at [") != std::string::npos);
    CHECK(m.front().find("expected") != std::string::npos);
  }
  // The wrong kernel touches f32 results only: the other dtypes still agree.
  for (const DType dtype : {DType::f64, DType::i32, DType::boolean}) {
    const auto& m = found.at({"clone", dtype});
    INFO((m.empty() ? std::string() : m.front()));
    CHECK(m.empty());
  }

  ctx.runtime().host().replace_kernels_for_testing(nullptr);
  for (const OpCase& c : op_cases()) {
    if (c.entry != "copy.copy_cast") continue;
    for (const DType dtype : c.dtypes) {
      const auto m = bo::compare_case(c, dtype, reference, reference_ctx, target, ctx);
      INFO((m.empty() ? std::string() : m.front()));
      CHECK(m.empty());
    }
  }
}

TEST_CASE("backend ops: an entry planted as unsupported fails with a device error naming op, dtype and cpu",
          "[backend]") {
  TestContext ctx(forge_test::context_options(1));
  const Tensor x = ctx.ones({4, 3});
  Tensor p = ctx.from_vector<float>({1, 2, 3}).requires_grad_();
  p.set_grad(ctx.from_vector<float>({1, 1, 1}));
  forge::optim::Adam adam({p});  // its state is made before the plant
  const auto require_device_error = [](const std::string& op, const std::string& dtype, auto&& fn) {
    const std::string message = forge_test::expect_error(forge::ErrorCode::device, op, fn);
    INFO(message);
    CHECK(message.find(dtype) != std::string::npos);
    CHECK(message.find("cpu") != std::string::npos);
  };

  forge::backend::Kernels table = *forge::backend::cpu_backend().kernels;
  // copy_cast no longer lists f16; fill has no kernel at all; Adam's step is missing.
  table.copy.copy_cast.dtypes =
      static_cast<forge::backend::DTypeMask>(table.copy.copy_cast.dtypes & ~forge::backend::mask_of(DType::f16));
  table.copy.fill.fn = nullptr;
  table.optim.adam_step = {};
  ctx.runtime().host().replace_kernels_for_testing(&table);

  require_device_error("to", "f16", [&] { (void)x.to(DType::f16); });
  CHECK(x.to(DType::f64).to_vector<double>() == std::vector<double>(12, 1.0));  // other dtypes still convert
  require_device_error("zeros", "f32", [&] { (void)ctx.zeros({2}); });
  require_device_error("fill_", "i32", [&] { (void)ctx.from_vector<std::int32_t>({1, 2}).fill_(3); });
  require_device_error("Adam", "f32", [&] { adam.step(); });
  CHECK(p.to_vector<float>() == std::vector<float>{1, 2, 3});  // nothing was updated

  ctx.runtime().host().replace_kernels_for_testing(nullptr);
  CHECK(x.to(DType::f16).to_vector<float>() == std::vector<float>(12, 1.0f));
  CHECK(ctx.zeros({2}).to_vector<float>() == std::vector<float>{0, 0});
  adam.step();
  CHECK(p.to_vector<float>() != std::vector<float>{1, 2, 3});
}

// ---- every entry of the table is exercised ----
// Each entry of a copy of the cpu table is wrapped in a probe that counts its
// calls and then runs the real kernel; every case runs, in every dtype, on
// a context holding that table, packed and strided; every entry the cpu
// backend fills must have been called. A new entry without a case fails
// here, naming it.

namespace {

struct Reached {
  int calls = 0;
  std::set<DType> case_dtypes;  // the dtypes of the cases that reached it
};

DType g_case_dtype = DType::f32;

template <typename Fn>
struct Probe;

template <typename R, typename... A>
struct Probe<R(A...)> {
  static constexpr int kSlots = 8;  // entries of one function type
  static inline std::array<R (*)(A...), kSlots> real{};
  static inline std::array<Reached*, kSlots> reached{};
  static inline int used = 0;

  template <int I>
  static R call(A... args) {
    ++reached[I]->calls;
    reached[I]->case_dtypes.insert(g_case_dtype);
    return real[I](args...);
  }
  template <int... I>
  static auto pick(int slot, std::integer_sequence<int, I...>) {
    R (*const fns[])(A...) = {&call<I>...};
    return fns[slot];
  }
  // A function that counts into `into` and calls `fn`.
  static R (*wrap(R (*fn)(A...), Reached* into))(A...) {
    const int slot = used++;
    REQUIRE(slot < kSlots);
    real[slot] = fn;
    reached[slot] = into;
    return pick(slot, std::make_integer_sequence<int, kSlots>{});
  }
};

template <typename Fn>
void probe(forge::backend::Entry<Fn>& entry, Reached* into) {
  entry.fn = Probe<Fn>::wrap(entry.fn, into);
}

}  // namespace

TEST_CASE("backend ops: the table lists every entry, and the cpu backend fills each one", "[backend]") {
  const forge::backend::Kernels& table = *forge::backend::cpu_backend().kernels;
  int entries = 0;
  forge::backend::for_each_entry(table, [&](const char* family, const char* name, const auto& entry) {
    INFO(family << "." << name);
    CHECK(entry.fn != nullptr);
    CHECK(entry.dtypes != 0);
    ++entries;
  });
  // visit() lists every member: the table is nothing but entries of one size.
  CHECK(static_cast<std::size_t>(entries) * sizeof(forge::backend::Entry<void()>) == sizeof(forge::backend::Kernels));
}

TEST_CASE("backend ops: the cases reach every entry of the kernel table", "[backend]") {
  forge::backend::Kernels table = *forge::backend::cpu_backend().kernels;
  std::map<std::string, Reached> reached;
  forge::backend::for_each_entry(table, [&](const char* family, const char* name, auto& entry) {
    probe(entry, &reached[std::string(family) + "." + name]);
  });
  for (const Target& target : {bo::reference_target(), bo::host_targets()[1]}) {
    TestContext ctx(forge_test::context_options(target.threads, {}, {}, target.device));
    ctx.runtime().host().replace_kernels_for_testing(&table);
    for (const OpCase& c : op_cases()) {
      for (const DType dtype : c.dtypes) {
        g_case_dtype = dtype;
        const bo::Results r = bo::run_case(c, dtype, target, ctx);
        INFO(c.name << " in " << forge::dtype_name(dtype) << " on " << target.name);
        CHECK(r.error == "");
      }
    }
    ctx.runtime().host().replace_kernels_for_testing(nullptr);
  }
  for (const auto& [name, r] : reached) {
    std::string dtypes;
    for (const DType d : r.case_dtypes) dtypes += std::string(forge::dtype_name(d)) + " ";
    INFO(name << ": " << r.calls << " calls, from cases in " << dtypes);
    CHECK(r.calls > 0);
  }
}
