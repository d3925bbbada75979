#pragma once
// Elementwise ops: NumPy broadcasting between tensor operands, libtorch's type
// promotion (promote_types between tensors, result_type with a Scalar).
//
// Every op has an `_into(out, ...)` form that writes into the caller's tensor:
// `out` must have the result's shape exactly, a dtype the result can be cast
// into (no float into an integer, nothing but bool into bool), the inputs'
// context, and may alias an input exactly (in place) but not overlap it
// partially. The forms without `out` allocate the result from the inputs'
// context (and hand it to the innermost open exec scope).

#include <optional>

#include "forge/scalar.h"
#include "forge/tensor.h"

namespace forge {

// ---- arithmetic ----
// Integer add/sub/mul wrap around; sub refuses bool. `div` is true division:
// integer and bool inputs give f32. `pow` of integers stays integral (a
// negative tensor exponent of an integer base other than 1 or -1 gives 0; a
// negative integer Scalar exponent is invalid_argument, as in libtorch).
// maximum/minimum propagate NaN.
Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, Scalar b);
Tensor sub(Scalar a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, Scalar b);
Tensor div(Scalar a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, Scalar b);
Tensor pow(Scalar a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

Tensor& add_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& add_into(Tensor& out, const Tensor& a, Scalar b);
Tensor& sub_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& sub_into(Tensor& out, const Tensor& a, Scalar b);
Tensor& mul_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& mul_into(Tensor& out, const Tensor& a, Scalar b);
Tensor& div_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& div_into(Tensor& out, const Tensor& a, Scalar b);
Tensor& pow_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& pow_into(Tensor& out, const Tensor& a, Scalar b);
Tensor& maximum_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& minimum_into(Tensor& out, const Tensor& a, const Tensor& b);

// ---- comparisons and logic: bool results ----
// Compared in the promoted dtype of the operands.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, Scalar b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);

Tensor& eq_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& ne_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& lt_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& le_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& gt_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& ge_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& logical_and_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& logical_or_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& logical_not_into(Tensor& out, const Tensor& x);

// ---- selection ----
// cond ? a : b, elementwise; cond is bool; the three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor& where_into(Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
// x with value wherever mask (bool, broadcasting to x's shape) is true; keeps x's dtype.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
Tensor& masked_fill_into(Tensor& out, const Tensor& x, const Tensor& mask, Scalar value);
// Bounds may be omitted (std::nullopt) but not both; NaN propagates.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor& clamp_into(Tensor& out, const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);

// ---- unary ----
// neg, abs, sign, square and relu keep the dtype (neg refuses bool; square of
// bool gives i64); the others compute in floating point: integer and bool
// inputs give f32.
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
enum class GeluApproximation { none, tanh };  // none: x * Phi(x) with erf
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::none);
Tensor silu(const Tensor& x);
// log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor erf(const Tensor& x);

Tensor& neg_into(Tensor& out, const Tensor& x);
Tensor& abs_into(Tensor& out, const Tensor& x);
Tensor& sign_into(Tensor& out, const Tensor& x);
Tensor& exp_into(Tensor& out, const Tensor& x);
Tensor& expm1_into(Tensor& out, const Tensor& x);
Tensor& log_into(Tensor& out, const Tensor& x);
Tensor& log1p_into(Tensor& out, const Tensor& x);
Tensor& sqrt_into(Tensor& out, const Tensor& x);
Tensor& rsqrt_into(Tensor& out, const Tensor& x);
Tensor& square_into(Tensor& out, const Tensor& x);
Tensor& reciprocal_into(Tensor& out, const Tensor& x);
Tensor& sin_into(Tensor& out, const Tensor& x);
Tensor& cos_into(Tensor& out, const Tensor& x);
Tensor& tanh_into(Tensor& out, const Tensor& x);
Tensor& sigmoid_into(Tensor& out, const Tensor& x);
Tensor& relu_into(Tensor& out, const Tensor& x);
Tensor& leaky_relu_into(Tensor& out, const Tensor& x, double negative_slope = 0.01);
Tensor& gelu_into(Tensor& out, const Tensor& x, GeluApproximation approximate = GeluApproximation::none);
Tensor& silu_into(Tensor& out, const Tensor& x);
Tensor& softplus_into(Tensor& out, const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor& elu_into(Tensor& out, const Tensor& x, double alpha = 1.0);
Tensor& erf_into(Tensor& out, const Tensor& x);

// ---- operators ----
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
inline Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
inline Tensor operator-(Scalar a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
inline Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
inline Tensor operator/(Scalar a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
inline Tensor operator==(const Tensor& a, Scalar b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
inline Tensor operator!=(const Tensor& a, Scalar b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
inline Tensor operator<(const Tensor& a, Scalar b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
inline Tensor operator<=(const Tensor& a, Scalar b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
inline Tensor operator>(const Tensor& a, Scalar b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
inline Tensor operator>=(const Tensor& a, Scalar b) { return ge(a, b); }
// In place: writes through `a`'s buffer (a must be writable and hold the result dtype).
inline Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
inline Tensor& operator+=(Tensor& a, Scalar b) { return a.add_(b); }
inline Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
inline Tensor& operator-=(Tensor& a, Scalar b) { return a.sub_(b); }
inline Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
inline Tensor& operator*=(Tensor& a, Scalar b) { return a.mul_(b); }
inline Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
inline Tensor& operator/=(Tensor& a, Scalar b) { return a.div_(b); }

}  // namespace forge
