#pragma once
// nn::Module: parameters, buffers and child modules registered by name.
//
// A module owns its weights (DESIGN §1): a pooled tensor or an arena output
// handed to register_parameter or register_buffer is copied into memory the
// module owns (64-byte aligned host memory outside the BufferPool), so
// weights never pin or come from the transient pool's cache. Modules are
// held by std::shared_ptr; children are shared. Names are dotted through
// children ("fc1.weight", "0.bias"), own entries first, then children in the
// order they were registered.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "forge/device.h"
#include "forge/dtype.h"
#include "forge/state_dict.h"
#include "forge/tensor.h"

namespace forge::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
class Module;
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The module's computation; the base class has none (not_implemented).
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  // The type's name for messages ("Linear").
  virtual const char* type_name() const { return "Module"; }

  // ---- registration (names: non-empty, no '.', unique in this module) ----
  // Returns the registered tensor: a leaf with requires_grad as asked, holding
  // the module's own copy when `t` came from the pool or an arena.
  Tensor register_parameter(const std::string& name, const Tensor& t, bool requires_grad = true);
  // State that is saved and converted but not trained (never requires grad).
  Tensor register_buffer(const std::string& name, const Tensor& t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // ---- traversal ----
  // Every parameter once (a tensor registered under two names counts once).
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  const NamedModules& named_children() const noexcept { return children_; }
  // This module (named "", when include_self) and every descendant, depth
  // first in registration order, with dotted names ("0", "0.fc1"); a module
  // registered twice is listed once, under its first name. The entry for this
  // module shares its owner when a shared_ptr holds it, else it owns nothing.
  NamedModules named_modules(bool include_self = true) const;
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true) const;
  // Calls fn on this module, then on every descendant (named_modules() order).
  Module& apply(const std::function<void(Module&)>& fn);
  Module& apply(const std::function<void(const std::string&, Module&)>& fn);

  // ---- freezing ----
  // Sets requires_grad on every parameter of this module and its descendants:
  // false freezes the subtree (its parameters get no .grad; their existing
  // .grad is kept, as libtorch). Optimizers skip parameters without a .grad.
  Module& requires_grad_(bool requires_grad = true);
  // How many elements the parameters hold (each tensor once), or only those
  // that require grad.
  std::int64_t parameter_count(bool trainable_only = false) const;

  // ---- printing ----
  // The module tree, one line per module with its parameter count and its own
  // parameters' shapes, e.g.
  //   Sequential (58 parameters)
  //     (0): Linear (40 parameters: weight [8, 4], bias [8])
  //     (1): ReLU
  // Counts say "N trainable" when some parameters are frozen.
  std::string to_string() const;

  // ---- mode (Dropout reads it), recursively ----
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const noexcept { return training_; }

  // Drops (set_to_none) or zeroes the .grad of every parameter.
  void zero_grad(bool set_to_none = true);

  // ---- conversion ----
  // Converts every floating parameter and buffer to `dtype`, replacing the
  // registered tensors (requires_grad kept). Handles taken before, such as an
  // optimizer's, keep the old tensors: convert before building the optimizer.
  // Needs the module's context to be the current one.
  void to(DType dtype);
  // Only the CPU exists: another device is an ErrorCode::device error.
  void to(Device device);

  // ---- checkpoints ----
  // Parameters and buffers by dotted name, detached views of the module's bytes.
  StateDict state_dict() const;
  // Copies the values of `dict` into the existing tensors (under no grad, so
  // optimizers keep their references). Everything is checked before anything
  // is written: strict requires exactly the module's names (invalid_argument
  // lists missing and unexpected keys) and equal dtypes (dtype); shapes must
  // always match (shape). Not strict: keys on one side only are skipped and
  // dtypes are converted.
  void load_state_dict(const StateDict& dict, bool strict = true);

 protected:
  // The registered parameter or buffer called `name`; throws invalid_argument when missing.
  const Tensor& parameter(std::string_view name) const;
  const Tensor& buffer(std::string_view name) const;
  // Replaces the child registered as `name` (invalid_argument when there is none).
  void replace_module(const std::string& name, std::shared_ptr<Module> module);
  // Unregisters the child `name` (invalid_argument when there is none).
  void remove_module(const std::string& name);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void print(std::ostream& out, const std::string& name, int depth) const;
  void check_new_name(const std::string& name, const char* op) const;
  // Every registered tensor slot of this module and its descendants, with dotted names.
  void collect_slots(const std::string& prefix, bool params, bool buffers, bool recurse,
                     std::vector<std::pair<std::string, Tensor*>>& out);
  std::vector<std::pair<std::string, Tensor*>> slots(bool params, bool buffers, bool recurse) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  NamedModules children_;
  bool training_ = true;
};

// Prints module.to_string().
std::ostream& operator<<(std::ostream& out, const Module& module);

}  // namespace forge::nn
