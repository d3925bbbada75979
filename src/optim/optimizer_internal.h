#pragma once
// What the optimizers' steps share beyond the Optimizer base class.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "forge/state_dict.h"
#include "forge/tensor.h"

namespace forge::optim {

// Every parameter's .grad, contiguous and of the parameter's dtype (undefined
// where there is none). A step takes them all before it updates anything, so
// a step that runs out of memory changes nothing.
std::vector<Tensor> packed_grads(const std::vector<Tensor>& params);

// A 0-d host tensor for a saved scalar (i64 or f64; a transient from the
// pool: the dict's, not the optimizer's).
Tensor scalar_tensor(Runtime& rt, double value, DType dtype, const char* op);

// A group's entry in a state dict: the bare name with one group (the dicts
// saved before groups existed load unchanged), else "group.<g>.<name>".
std::string group_key(std::size_t group, std::size_t groups, const std::string& name);

// Reads the entries of a state dict being loaded, naming `op` in every error,
// and remembers which keys it read so that finish() can refuse the others.
class DictReader {
 public:
  DictReader(const StateDict& dict, std::string op) : dict_(dict), op_(std::move(op)) {}
  const std::string& op() const noexcept { return op_; }
  // The tensor at `key` (invalid_argument when missing or undefined).
  const Tensor& find(const std::string& key);
  // A 0-d tensor's value (shape error otherwise).
  double scalar(const std::string& key);
  // A non-negative integral value exact in a double.
  std::int64_t count(const std::string& key);
  // invalid_argument naming the first key never read; `what` describes the loader.
  void finish(const std::string& what) const;

 private:
  const StateDict& dict_;
  std::string op_;
  std::set<std::string> read_;
};

}  // namespace forge::optim
