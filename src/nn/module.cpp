#include "forge/nn/module.h"

#include <algorithm>
#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include "forge/autograd.h"
#include "forge/exec_context.h"
#include "nn/owned.h"

namespace forge::nn {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// A pooled tensor, or an arena output that the arena's next call would
// overwrite, becomes the module's own copy; memory the caller lent (a file
// mapping, from_blob) stays where the load put it.
Tensor adopt(const Tensor& t, const char* op) {
  FORGE_CHECK(t.defined(), invalid_argument, op, "undefined tensor");
  if (t.buffer()->pooled() || t.buffer()->arena() != nullptr)
    return detail::owned_copy(detail::context_of(t, op), t, t.dtype(), op);
  return t.is_leaf() ? t : t.detach();
}

}  // namespace

Tensor Module::forward(const Tensor&) {
  FORGE_FAIL(not_implemented, "nn.forward", type_name(), " has no forward(const Tensor&)");
}

void Module::check_new_name(const std::string& name, const char* op) const {
  FORGE_CHECK(!name.empty() && name.find('.') == std::string::npos, invalid_argument, op, "name '", name,
              "' must be non-empty and contain no '.'");
  const auto taken = [&](const auto& entries) {
    return std::any_of(entries.begin(), entries.end(), [&](const auto& e) { return e.first == name; });
  };
  FORGE_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), invalid_argument, op, type_name(),
              " already has an entry named '", name, "'");
}

Tensor Module::register_parameter(const std::string& name, const Tensor& t, bool requires_grad) try {
  const char* op = "nn.register_parameter";
  check_new_name(name, op);
  FORGE_CHECK(t.defined(), invalid_argument, op, "parameter '", name, "' is undefined");
  FORGE_CHECK(!requires_grad || is_floating(t.dtype()), dtype, op, "parameter '", name, "' holds ",
              dtype_name(t.dtype()), "; only floating parameters can require grad");
  Tensor p = adopt(t, op);
  p.requires_grad_(requires_grad);
  parameters_.emplace_back(name, p);
  return p;
}
FORGE_CATCH_OOM("nn.register_parameter")

Tensor Module::register_buffer(const std::string& name, const Tensor& t) try {
  const char* op = "nn.register_buffer";
  check_new_name(name, op);
  FORGE_CHECK(t.defined(), invalid_argument, op, "buffer '", name, "' is undefined");
  Tensor b = adopt(t, op);
  if (b.requires_grad()) b = b.detach();
  buffers_.emplace_back(name, b);
  return b;
}
FORGE_CATCH_OOM("nn.register_buffer")

void Module::replace_module(const std::string& name, std::shared_ptr<Module> module) try {
  const char* op = "nn.replace_module";
  FORGE_CHECK(module != nullptr, invalid_argument, op, "module '", name, "' is null");
  for (auto& [n, child] : children_)
    if (n == name) {
      child = std::move(module);
      return;
    }
  FORGE_FAIL(invalid_argument, op, type_name(), " has no child module '", name, "'");
}
FORGE_CATCH_OOM("nn.replace_module")

void Module::remove_module(const std::string& name) try {
  const auto it = std::find_if(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  FORGE_CHECK(it != children_.end(), invalid_argument, "nn.remove_module", type_name(), " has no child module '", name,
              "'");
  children_.erase(it);
}
FORGE_CATCH_OOM("nn.remove_module")

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) try {
  const char* op = "nn.register_module";
  check_new_name(name, op);
  FORGE_CHECK(module != nullptr, invalid_argument, op, "module '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}
FORGE_CATCH_OOM("nn.register_module")

const Tensor& Module::parameter(std::string_view name) const {
  for (const auto& [n, t] : parameters_)
    if (n == name) return t;
  FORGE_FAIL(invalid_argument, "nn.parameter", type_name(), " has no parameter '", name, "'");
}

const Tensor& Module::buffer(std::string_view name) const {
  for (const auto& [n, t] : buffers_)
    if (n == name) return t;
  FORGE_FAIL(invalid_argument, "nn.buffer", type_name(), " has no buffer '", name, "'");
}

void Module::collect_slots(const std::string& prefix, bool params, bool buffers, bool recurse,
                           std::vector<std::pair<std::string, Tensor*>>& out) {
  if (params)
    for (auto& [n, t] : parameters_) out.emplace_back(prefix + n, &t);
  if (buffers)
    for (auto& [n, t] : buffers_) out.emplace_back(prefix + n, &t);
  if (!recurse) return;
  for (auto& [n, child] : children_) child->collect_slots(prefix + n + ".", params, buffers, true, out);
}

std::vector<std::pair<std::string, Tensor*>> Module::slots(bool params, bool buffers, bool recurse) const {
  std::vector<std::pair<std::string, Tensor*>> out;
  // Traversal only reads; the slots are handed out mutable for to() and load_state_dict().
  const_cast<Module*>(this)->collect_slots("", params, buffers, recurse, out);
  return out;
}

NamedTensors Module::named_parameters(bool recurse) const try {
  NamedTensors out;
  for (auto& [n, t] : slots(true, false, recurse)) out.emplace_back(n, *t);
  return out;
}
FORGE_CATCH_OOM("nn.named_parameters")

NamedTensors Module::named_buffers(bool recurse) const try {
  NamedTensors out;
  for (auto& [n, t] : slots(false, true, recurse)) out.emplace_back(n, *t);
  return out;
}
FORGE_CATCH_OOM("nn.named_buffers")

std::vector<Tensor> Module::parameters(bool recurse) const try {
  std::vector<Tensor> out;
  std::set<const TensorImpl*> seen;  // a tied weight is stepped once
  for (auto& [n, t] : slots(true, false, recurse))
    if (seen.insert(t->impl()).second) out.push_back(*t);
  return out;
}
FORGE_CATCH_OOM("nn.parameters")

std::vector<Tensor> Module::buffers(bool recurse) const try {
  std::vector<Tensor> out;
  for (auto& [n, t] : slots(false, true, recurse)) out.push_back(*t);
  return out;
}
FORGE_CATCH_OOM("nn.buffers")

std::vector<std::shared_ptr<Module>> Module::children() const try {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, c] : children_) out.push_back(c);
  return out;
}
FORGE_CATCH_OOM("nn.children")

NamedModules Module::named_modules(bool include_self) const try {
  NamedModules out;
  std::set<const Module*> seen{this};
  if (include_self) {
    // Shares the owner when there is one; else an entry that owns nothing (a module on the stack).
    std::shared_ptr<Module> self = std::const_pointer_cast<Module>(weak_from_this().lock());
    if (!self) self = std::shared_ptr<Module>(std::shared_ptr<Module>(), const_cast<Module*>(this));
    out.emplace_back("", std::move(self));
  }
  // Depth first, each module before its children.
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    for (const auto& [n, child] : m.children_) {
      if (!seen.insert(child.get()).second) continue;
      out.emplace_back(prefix + n, child);
      walk(*child, prefix + n + ".");
    }
  };
  walk(*this, "");
  return out;
}
FORGE_CATCH_OOM("nn.named_modules")

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) const try {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : named_modules(include_self)) out.push_back(std::move(m));
  return out;
}
FORGE_CATCH_OOM("nn.modules")

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& [n, m] : named_modules(true)) fn(*m);
  return *this;
}

Module& Module::apply(const std::function<void(const std::string&, Module&)>& fn) {
  for (const auto& [n, m] : named_modules(true)) fn(n, *m);
  return *this;
}

Module& Module::requires_grad_(bool requires_grad) try {
  for (Tensor& p : parameters()) {
    FORGE_CHECK(!requires_grad || is_floating(p.dtype()), dtype, "nn.requires_grad_", "a parameter holds ",
                dtype_name(p.dtype()), "; only floating parameters can require grad");
  }
  for (Tensor& p : parameters()) p.requires_grad_(requires_grad);
  return *this;
}
FORGE_CATCH_OOM("nn.requires_grad_")

std::int64_t Module::parameter_count(bool trainable_only) const try {
  std::int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}
FORGE_CATCH_OOM("nn.parameter_count")

void Module::print(std::ostream& out, const std::string& name, int depth) const {
  out << std::string(static_cast<std::size_t>(2 * depth), ' ');
  if (depth > 0) out << "(" << name << "): ";
  out << type_name();
  const std::int64_t total = parameter_count(), trainable = parameter_count(true);
  if (total > 0 || !parameters_.empty()) {
    out << " (" << total << (total == 1 ? " parameter" : " parameters");
    if (trainable != total) out << ", " << trainable << " trainable";
    for (std::size_t i = 0; i < parameters_.size(); ++i)
      out << (i == 0 ? ": " : ", ") << parameters_[i].first << " " << parameters_[i].second.shape();
    out << ")";
  }
  out << "\n";
  for (const auto& [n, child] : children_) child->print(out, n, depth + 1);
}

std::string Module::to_string() const try {
  std::ostringstream out;
  print(out, "", 0);
  return out.str();
}
FORGE_CATCH_OOM("nn.to_string")

std::ostream& operator<<(std::ostream& out, const Module& module) { return out << module.to_string(); }

void Module::train(bool on) try {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}
FORGE_CATCH_OOM("nn.train")

void Module::zero_grad(bool set_to_none) try {
  for (Tensor& p : parameters()) p.zero_grad(set_to_none);
}
FORGE_CATCH_OOM("nn.zero_grad")

void Module::to(DType dtype) try {
  const char* op = "nn.to";
  FORGE_CHECK(is_floating(dtype), dtype, op, type_name(), " can only convert to a floating dtype, not ",
              dtype_name(dtype));
  // Make every replacement first, so a failure changes nothing; a tensor
  // registered twice (tied) gets one replacement.
  const auto all = slots(true, true, true);
  std::map<const TensorImpl*, Tensor> fresh;
  for (const auto& [name, slot] : all) {
    const Tensor& t = *slot;
    if (!is_floating(t.dtype()) || t.dtype() == dtype || fresh.count(t.impl())) continue;
    Tensor c = detail::owned_copy(detail::context_of(t, op), t, dtype, op);
    if (t.requires_grad()) c.requires_grad_(true);
    fresh.emplace(t.impl(), std::move(c));
  }
  for (const auto& [name, slot] : all) {
    const auto it = fresh.find(slot->impl());
    if (it != fresh.end()) *slot = it->second;
  }
}
FORGE_CATCH_OOM("nn.to")

void Module::to(Device device) try {
  FORGE_CHECK(device.is_cpu(), device, "nn.to", type_name(), " cannot move to ", device.str(),
              ": modules live on the CPU");
}
FORGE_CATCH_OOM("nn.to")

StateDict Module::state_dict() const try {
  StateDict out;
  for (const auto& [name, slot] : slots(true, true, true)) out.emplace(name, slot->detach());
  return out;
}
FORGE_CATCH_OOM("nn.state_dict")

void Module::load_state_dict(const StateDict& dict, bool strict) try {
  const char* op = "nn.load_state_dict";
  const auto own = slots(true, true, true);
  std::vector<std::string> missing, unexpected, bad_shape, bad_dtype;
  std::set<std::string> known;
  for (const auto& [name, slot] : own) {
    known.insert(name);
    const auto it = dict.find(name);
    if (it == dict.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& src = it->second;
    FORGE_CHECK(src.defined(), invalid_argument, op, "entry '", name, "' is undefined");
    FORGE_CHECK(&src.runtime() == &slot->runtime(), device, op, "entry '", name,
                "' belongs to another ExecContext than the module");
    std::ostringstream what;
    if (src.shape() != slot->shape()) {
      what << name << ": " << src.shape() << " in the dict, " << slot->shape() << " in the module";
      bad_shape.push_back(what.str());
    } else if (src.dtype() != slot->dtype()) {
      what << name << ": " << dtype_name(src.dtype()) << " in the dict, " << dtype_name(slot->dtype())
           << " in the module";
      bad_dtype.push_back(what.str());
    }
  }
  for (const auto& [name, t] : dict)
    if (!known.count(name)) unexpected.push_back(name);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::string what;
    if (!missing.empty()) what = "missing keys [" + join(missing) + "]";
    if (!unexpected.empty())
      what += (what.empty() ? "" : ", ") + std::string("unexpected keys [") + join(unexpected) + "]";
    FORGE_FAIL(invalid_argument, op, type_name(), ": ", what);
  }
  FORGE_CHECK(bad_shape.empty(), shape, op, type_name(), ": shapes differ for ", join(bad_shape));
  FORGE_CHECK(!strict || bad_dtype.empty(), dtype, op, type_name(), ": dtypes differ for ", join(bad_dtype));

  autograd::NoGradGuard no_grad;
  for (const auto& [name, slot] : own) {
    const auto it = dict.find(name);
    if (it != dict.end() && !it->second.is_same(*slot)) slot->copy_(it->second);
  }
}
FORGE_CATCH_OOM("nn.load_state_dict")

}  // namespace forge::nn
