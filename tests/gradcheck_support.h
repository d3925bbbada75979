#pragma once
// check_gradients: the finite-difference check every differentiable op gets.
// fn runs on f64 inputs under autograd::gradcheck, then on f32 copies of the
// floating inputs; the f32 VJP must agree with the f64 one.

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <vector>

#include "forge/forge.h"

namespace forge_test {

using GradFn = std::function<forge::Tensor(const std::vector<forge::Tensor>&)>;

// inputs: f64 tensors (those that require grad are checked; they may be
// non-contiguous views made leaves with requires_grad_()) and any others fn
// needs (indices, masks). f32_rtol bounds |g32 - g64| / (1 + |g64|).
inline void check_gradients(const GradFn& fn, const std::vector<forge::Tensor>& inputs, double f32_rtol = 2e-3,
                            const forge::autograd::GradcheckOptions& options = {}) {
  const forge::autograd::GradcheckResult r = forge::autograd::gradcheck(fn, inputs, options);
  INFO("gradcheck: " << r.message << " (max abs error " << r.max_abs_error << ")");
  REQUIRE(r.ok);

  std::vector<forge::Tensor> wrt64, in32, wrt32;
  for (const forge::Tensor& t : inputs) {
    if (t.defined() && t.dtype() == forge::DType::f64) {
      forge::Tensor c = t.detach().to(forge::DType::f32);
      if (t.requires_grad()) {
        c.requires_grad_();
        wrt64.push_back(t);
        wrt32.push_back(c);
      }
      in32.push_back(c);
    } else {
      in32.push_back(t);
    }
  }
  const forge::Tensor out64 = fn(inputs);
  const forge::Tensor out32 = fn(in32);
  REQUIRE(out32.dtype() == forge::DType::f32);
  const forge::Tensor w = forge::ones(out64.shape(), forge::DType::f64);
  const auto g64 = forge::autograd::grad({out64}, wrt64, {.grad_outputs = {w}, .allow_unused = true});
  const auto g32 =
      forge::autograd::grad({out32}, wrt32, {.grad_outputs = {w.to(forge::DType::f32)}, .allow_unused = true});
  for (std::size_t k = 0; k < g64.size(); ++k) {
    REQUIRE(g64[k].defined() == g32[k].defined());
    if (!g64[k].defined()) continue;
    REQUIRE(g32[k].dtype() == forge::DType::f32);
    const auto a = g64[k].to_vector<double>();
    const auto b = g32[k].to_vector<double>();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO("f32 gradient of input " << k << " element " << i);
      CHECK(std::abs(a[i] - b[i]) <= f32_rtol * (1.0 + std::abs(a[i])));
    }
  }
}

}  // namespace forge_test
