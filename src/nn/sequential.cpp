#include "forge/nn/sequential.h"

#include <string>

namespace forge::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) try {
  for (const auto& m : modules) push_back(m);
}
FORGE_CATCH_OOM("nn.Sequential")

void Sequential::push_back(std::shared_ptr<Module> module) try {
  register_module(std::to_string(size()), std::move(module));
}
FORGE_CATCH_OOM("nn.Sequential")

Tensor Sequential::forward(const Tensor& x) try {
  FORGE_CHECK(size() > 0, invalid_argument, "nn.Sequential", "forward on an empty Sequential");
  Tensor y = named_children().front().second->forward(x);
  for (std::size_t i = 1; i < size(); ++i) y = named_children()[i].second->forward(y);
  return y;
}
FORGE_CATCH_OOM("nn.Sequential")

std::shared_ptr<Module> Sequential::at(std::size_t i) const {
  FORGE_CHECK(i < size(), out_of_range, "nn.Sequential", "index ", i, " is past the last of ", size(), " modules");
  return named_children()[i].second;
}

}  // namespace forge::nn
