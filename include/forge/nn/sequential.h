#pragma once
// Sequential: children named "0", "1", ... run in order, each on the
// previous one's output.

#include <cstddef>
#include <initializer_list>
#include <memory>

#include "forge/exec_context.h"
#include "forge/nn/module.h"

namespace forge::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  // The context is accepted for symmetry with the other modules; a Sequential owns no tensors itself.
  explicit Sequential(ExecContext&) {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);

  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "Sequential"; }

  std::size_t size() const noexcept { return named_children().size(); }
  // The i-th module (out_of_range past the end).
  std::shared_ptr<Module> at(std::size_t i) const;
  std::shared_ptr<Module> operator[](std::size_t i) const { return at(i); }
};

}  // namespace forge::nn
