#pragma once
// Custom autograd functions in C++, in libtorch's shape (docs/AUTOGRAD.md
// "Custom functions"):
//
//   struct MulConstant : forge::autograd::Function<MulConstant> {
//     static constexpr const char* name = "MulConstant";
//     static Tensor forward(AutogradContext* ctx, const Tensor& x, double c) {
//       ctx->saved_data["c"] = c;
//       return x * c;
//     }
//     static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
//       return {grad_outputs[0] * ctx->saved_data["c"].to_double(), Tensor()};
//     }
//   };
//   Tensor y = MulConstant::apply(x, 2.0);
//
// - forward runs under no grad; its output is recorded as one node (forge
//   nodes have one output: forward returns one Tensor).
// - Inputs are the Tensor (and std::vector<Tensor>, flattened) arguments.
//   backward gets the gradient of the output and returns a gradient per
//   input (undefined: none), or, as libtorch, one per argument with an
//   undefined tensor for each argument that is not a tensor. A wrong count,
//   a gradient where no tensor was passed, or a gradient whose shape is not
//   its input's is ErrorCode::backward naming the function.
// - save_for_backward keeps tensors the way built-in rules do (views, the
//   buffer's version checked when backward runs); saved_data keeps anything
//   else. mark_non_differentiable(out) makes the output not require grad.
// - The name is `static constexpr const char* name` or `static const char*
//   name()` when the class has one, else its demangled type name.
// Not supported: several outputs, mark_dirty (an in-place forward).

#include <any>
#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include "forge/autograd.h"
#include "forge/tensor.h"

namespace forge::autograd {
class AutogradContext;
}

namespace forge::detail {

class FunctionNode;  // src/autograd/function.cpp

using FunctionBackward = std::vector<Tensor> (*)(autograd::AutogradContext*, std::vector<Tensor>);

// One call of a Function: the node is made before forward (it holds the
// context), and recorded by finish() when an input requires grad.
class FunctionCall {
 public:
  FunctionCall(const char* name, FunctionBackward backward, std::vector<Tensor> inputs,
               std::vector<bool> is_tensor_argument);
  ~FunctionCall();
  FunctionCall(const FunctionCall&) = delete;
  FunctionCall& operator=(const FunctionCall&) = delete;

  autograd::AutogradContext* ctx() const noexcept;
  Tensor finish(Tensor out);

 private:
  FunctionNode* node_;
};

template <typename T>
void collect_argument(std::vector<Tensor>& inputs, std::vector<bool>& is_tensor, const T& arg) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) {
    inputs.push_back(arg);
    is_tensor.push_back(true);
  } else if constexpr (std::is_same_v<D, std::vector<Tensor>>) {
    for (const Tensor& t : arg) collect_argument(inputs, is_tensor, t);
  } else {
    is_tensor.push_back(false);
  }
}

std::string demangle(const char* mangled);

template <typename F>
const char* function_name() {
  if constexpr (requires {
                  { F::name } -> std::convertible_to<const char*>;
                }) {
    return F::name;
  } else if constexpr (requires {
                         { F::name() } -> std::convertible_to<const char*>;
                       }) {
    return F::name();
  } else {
    static const std::string name = demangle(typeid(F).name());
    return name.c_str();
  }
}

}  // namespace forge::detail

namespace forge::autograd {

using variable_list = std::vector<Tensor>;

// A value kept in AutogradContext::saved_data: a number, a bool, a Tensor,
// or any copyable value (read back with get<T>()). Reading it as the wrong
// type is ErrorCode::invalid_argument.
class SavedValue {
 public:
  SavedValue() = default;
  template <typename T>
  requires(!std::same_as<std::decay_t<T>, SavedValue>) SavedValue(T&& value)
      : value_(normalize(std::forward<T>(value))) {}  // NOLINT: implicit, as IValue

  double to_double() const;  // a double or an integer
  std::int64_t to_int() const;
  bool to_bool() const;
  const Tensor& to_tensor() const;
  template <typename T>
  const T& get() const {
    const T* p = std::any_cast<T>(&value_);
    if (!p) wrong_type(typeid(T).name());
    return *p;
  }
  bool has_value() const noexcept { return value_.has_value(); }

 private:
  template <typename T>
  static auto normalize(T&& v) {
    using D = std::decay_t<T>;
    if constexpr (std::is_same_v<D, bool>)
      return v;
    else if constexpr (std::is_integral_v<D>)
      return static_cast<std::int64_t>(v);
    else if constexpr (std::is_floating_point_v<D>)
      return static_cast<double>(v);
    else if constexpr (std::is_same_v<D, const char*> || std::is_same_v<D, char*>)
      return std::string(v);
    else
      return D(std::forward<T>(v));
  }
  [[noreturn]] void wrong_type(const char* wanted) const;
  std::any value_;
};

class AutogradContext {
 public:
  AutogradContext() = default;
  AutogradContext(const AutogradContext&) = delete;
  AutogradContext& operator=(const AutogradContext&) = delete;

  // In forward: the tensors backward will read (inputs or the output).
  void save_for_backward(std::vector<Tensor> to_save);
  // In backward: those tensors; ErrorCode::backward if one was written in place since.
  std::vector<Tensor> get_saved_variables() const;
  // In forward, on its output: the output will not require grad.
  void mark_non_differentiable(const std::vector<Tensor>& outputs);
  // Whether input i (counting tensor inputs) needs a gradient.
  bool needs_input_grad(std::size_t i) const;

  std::unordered_map<std::string, SavedValue> saved_data;

 private:
  friend class detail::FunctionNode;
  friend class detail::FunctionCall;
  const detail::FunctionNode* node_ = nullptr;
  std::vector<Tensor> to_save_;
  std::vector<Tensor> non_differentiable_;
  std::vector<bool> needs_input_grad_;
  bool forward_done_ = false;
};

template <typename Derived>
struct Function {
  template <typename... Args>
  static Tensor apply(Args&&... args) {
    std::vector<Tensor> inputs;
    std::vector<bool> is_tensor;
    (detail::collect_argument(inputs, is_tensor, args), ...);
    detail::FunctionCall call(
        detail::function_name<Derived>(),
        [](AutogradContext* ctx, std::vector<Tensor> grads) -> std::vector<Tensor> {
          return Derived::backward(ctx, std::move(grads));
        },
        std::move(inputs), std::move(is_tensor));
    static_assert(std::is_same_v<decltype(Derived::forward(call.ctx(), std::forward<Args>(args)...)), Tensor>,
                  "forward must return one Tensor: a forge node has one output");
    Tensor out;
    {
      NoGradGuard no_grad;
      out = Derived::forward(call.ctx(), std::forward<Args>(args)...);
    }
    return call.finish(std::move(out));
  }
};

}  // namespace forge::autograd
