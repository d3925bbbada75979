#include "forge/nn/containers.h"

#include "forge/error.h"

namespace forge::nn {

// ---- ModuleList ----

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) try {
  for (const auto& m : modules) push_back(m);
}
FORGE_CATCH_OOM("nn.ModuleList")

void ModuleList::push_back(std::shared_ptr<Module> module) try {
  modules_.reserve(modules_.size() + 1);  // so that the push_back below cannot throw after registering
  register_module(std::to_string(size()), module);
  modules_.push_back(std::move(module));
}
FORGE_CATCH_OOM("nn.ModuleList")

void ModuleList::extend(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules) push_back(m);
}

std::shared_ptr<Module> ModuleList::at(std::size_t i) const {
  FORGE_CHECK(i < size(), out_of_range, "nn.ModuleList", "index ", i, " is past the last of ", size(), " modules");
  return modules_[i];
}

void ModuleList::wrong_type(const char* op, const std::string& name) {
  FORGE_FAIL(invalid_argument, op, "module '", name, "' is not of the type asked for");
}

// ---- ModuleDict ----

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules) try {
  for (const auto& [key, m] : modules) insert(key, m);
}
FORGE_CATCH_OOM("nn.ModuleDict")

bool ModuleDict::contains(const std::string& key) const noexcept {
  for (const auto& [n, m] : named_children())
    if (n == key) return true;
  return false;
}

void ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) try {
  if (contains(key))
    replace_module(key, std::move(module));
  else
    register_module(key, std::move(module));
}
FORGE_CATCH_OOM("nn.ModuleDict")

std::shared_ptr<Module> ModuleDict::at(const std::string& key) const try {
  for (const auto& [n, m] : named_children())
    if (n == key) return m;
  std::string known;
  for (const std::string& k : keys()) known += (known.empty() ? "" : ", ") + k;
  FORGE_FAIL(invalid_argument, "nn.ModuleDict", "no module under key '", key, "' (keys: [", known, "])");
}
FORGE_CATCH_OOM("nn.ModuleDict")

std::shared_ptr<Module> ModuleDict::pop(const std::string& key) try {
  std::shared_ptr<Module> m = at(key);
  remove_module(key);
  return m;
}
FORGE_CATCH_OOM("nn.ModuleDict")

std::vector<std::string> ModuleDict::keys() const try {
  std::vector<std::string> out;
  for (const auto& [n, m] : named_children()) out.push_back(n);
  return out;
}
FORGE_CATCH_OOM("nn.ModuleDict")

}  // namespace forge::nn
