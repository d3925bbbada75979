#pragma once
// ModuleList and ModuleDict (as libtorch's): containers that register their
// modules as children, so parameters(), state_dict(), train(), to() and
// printing see them, without a forward of their own (calling forward is
// not_implemented: the owner decides how the modules run).
//   ModuleList: children named "0", "1", ... in order.
//   ModuleDict: children named by key, in insertion order; inserting an
//   existing key replaces that module in place (its position is kept).

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "forge/nn/module.h"

namespace forge::nn {

class ModuleList : public Module {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);

  void push_back(std::shared_ptr<Module> module);
  void extend(const std::vector<std::shared_ptr<Module>>& modules);
  const char* type_name() const override { return "ModuleList"; }

  std::size_t size() const noexcept { return named_children().size(); }
  bool empty() const noexcept { return size() == 0; }
  // The i-th module (out_of_range past the end).
  std::shared_ptr<Module> at(std::size_t i) const;
  std::shared_ptr<Module> operator[](std::size_t i) const { return at(i); }
  // The i-th module as a T (invalid_argument when it is not one).
  template <typename T>
  std::shared_ptr<T> at(std::size_t i) const {
    return cast<T>(at(i), std::to_string(i));
  }

  // Range-for over the modules.
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const noexcept { return modules_.begin(); }
  std::vector<std::shared_ptr<Module>>::const_iterator end() const noexcept { return modules_.end(); }

 private:
  template <typename T>
  static std::shared_ptr<T> cast(std::shared_ptr<Module> m, const std::string& name) {
    auto t = std::dynamic_pointer_cast<T>(std::move(m));
    if (!t) wrong_type("nn.ModuleList", name);
    return t;
  }
  [[noreturn]] static void wrong_type(const char* op, const std::string& name);
  std::vector<std::shared_ptr<Module>> modules_;

  friend class ModuleDict;
};

class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules);

  // Adds `module` under `key`, or replaces the module already there.
  void insert(const std::string& key, std::shared_ptr<Module> module);
  // Removes and returns the module under `key` (invalid_argument when missing).
  std::shared_ptr<Module> pop(const std::string& key);
  const char* type_name() const override { return "ModuleDict"; }

  std::size_t size() const noexcept { return named_children().size(); }
  bool empty() const noexcept { return size() == 0; }
  bool contains(const std::string& key) const noexcept;
  // The module under `key` (invalid_argument naming the keys when missing).
  std::shared_ptr<Module> at(const std::string& key) const;
  std::shared_ptr<Module> operator[](const std::string& key) const { return at(key); }
  template <typename T>
  std::shared_ptr<T> at(const std::string& key) const {
    auto t = std::dynamic_pointer_cast<T>(at(key));
    if (!t) ModuleList::wrong_type("nn.ModuleDict", key);
    return t;
  }
  std::vector<std::string> keys() const;
  std::vector<std::shared_ptr<Module>> values() const { return children(); }
  // (key, module) in insertion order; range-for works on it.
  const NamedModules& items() const noexcept { return named_children(); }
};

}  // namespace forge::nn
