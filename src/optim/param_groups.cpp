#include "forge/optim/param_groups.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <string_view>

#include "forge/error.h"

namespace forge::optim {

namespace {

bool contains_norm(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("norm") != std::string::npos;
}

// Norm layers' scales, biases and other vectors are not decayed (as in
// GPT-2/BERT training recipes): decay there shrinks what sets a scale.
bool exempt(const std::string& name, const Tensor& p) {
  const std::string_view n = name;
  return p.dim() <= 1 || (n.size() >= 4 && n.substr(n.size() - 4) == "bias") || contains_norm(n);
}

}  // namespace

std::vector<ParamGroup> decay_groups(const nn::Module& module, double weight_decay) try {
  FORGE_CHECK(weight_decay >= 0, invalid_argument, "decay_groups", "weight_decay ", weight_decay,
              " must not be negative or NaN");
  std::vector<ParamGroup> groups(2);
  groups[0].options.weight_decay = weight_decay;
  groups[1].options.weight_decay = 0.0;
  std::set<const TensorImpl*> seen;  // a tied weight goes where its first name puts it
  for (const auto& [name, p] : module.named_parameters())
    if (seen.insert(p.impl()).second) groups[exempt(name, p) ? 1 : 0].params.push_back(p);
  return groups;
}
FORGE_CATCH_OOM("decay_groups")

}  // namespace forge::optim
