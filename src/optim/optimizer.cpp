#include "forge/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <unordered_map>

#include "core/internal.h"
#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "optim/optimizer_internal.h"

namespace forge::optim {

namespace {

// A zeroed tensor over 64-byte aligned host memory the tensor itself owns:
// optimizer state belongs to the optimizer, so it stays out of the transient
// pool's cache and counts and is freed when its last view dies.
Tensor owned_zeros(Runtime& rt, const Shape& shape, DType dtype, const char* op) {
  if (!rt.device().is_cpu()) {  // device memory from the device's own source, zeroed by its kernel
    Tensor t = detail::allocate_owned(rt, shape, dtype, op);
    t.zero_();
    return t;
  }
  const std::int64_t n = detail::checked_numel(op, shape, dtype);
  const std::size_t nbytes = static_cast<std::size_t>(n) * dtype_size(dtype);
  const std::size_t rounded =
      (nbytes + Buffer::kAlignmentBytes - 1) / Buffer::kAlignmentBytes * Buffer::kAlignmentBytes;
  void* data = std::aligned_alloc(Buffer::kAlignmentBytes, rounded == 0 ? Buffer::kAlignmentBytes : rounded);
  FORGE_CHECK(data != nullptr, out_of_memory, op, "cannot allocate ", nbytes, " bytes of optimizer state");
  std::memset(data, 0, nbytes);
  Ref<Buffer> buffer;
  try {
    buffer = Buffer::borrow(data, nbytes, rt.device(), [data] { std::free(data); });
  } catch (...) {
    std::free(data);  // borrow refused before it owned the release
    throw;
  }
  return Tensor(Ref<TensorImpl>::adopt(new TensorImpl(detail::internal, Ref<Runtime>::share(&rt), std::move(buffer),
                                                      shape, contiguous_strides(shape), 0, dtype)));
}

std::string state_key(std::size_t param, const std::string& slot) {
  return "state." + std::to_string(param) + "." + slot;
}

// A step updates each entry in place, so two entries that share bytes would
// be updated twice per step (or each with the other's gradient): refuse a
// parameter listed twice and views whose bytes meet. Parameters are
// contiguous, each holding bytes [offset, offset + nbytes) of its buffer;
// sorted by (buffer, first byte), disjoint spans each end before the next begins.
void check_disjoint(const char* op, const std::vector<Tensor>& params) {
  std::unordered_map<const TensorImpl*, std::size_t> seen;
  struct Span {
    const Buffer* buffer;
    std::size_t begin, end, index;
  };
  std::vector<Span> spans;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    const auto [at, fresh] = seen.emplace(p.impl(), i);
    FORGE_CHECK(fresh, invalid_argument, op, "parameter ", i, " is parameter ", at->second,
                " listed again; list each parameter once");
    const std::size_t begin = static_cast<std::size_t>(p.offset()) * p.element_size();
    if (p.nbytes() > 0) spans.push_back({p.buffer().get(), begin, begin + p.nbytes(), i});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    if (a.buffer != b.buffer) return std::less<const Buffer*>()(a.buffer, b.buffer);
    return a.begin < b.begin;
  });
  for (std::size_t k = 1; k < spans.size(); ++k) {
    const Span &prev = spans[k - 1], &cur = spans[k];
    if (prev.buffer != cur.buffer || cur.begin >= prev.end) continue;
    const Span &first = prev.index < cur.index ? prev : cur, &second = prev.index < cur.index ? cur : prev;
    FORGE_FAIL(invalid_argument, op, "parameters ", first.index, " and ", second.index, " overlap in memory (bytes [",
               first.begin, ", ", first.end, ") and [", second.begin, ", ", second.end,
               ") of one buffer); a step would update the shared elements twice");
  }
}

// What every optimizer takes: leaves of one context that require grad,
// contiguous f32 or f64 on the context's device (check_input), no two
// sharing a byte.
void check_params(const char* op, const std::vector<Tensor>& params) {
  FORGE_CHECK(!params.empty(), invalid_argument, op, "got an empty parameter list");
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    detail::check_input(op, p, "parameter");
    detail::check_same_runtime(op, params[0], p);
    FORGE_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, dtype, op, "parameter ", i, " holds ",
                dtype_name(p.dtype()), "; ", op, " updates f32 and f64 parameters");
    FORGE_CHECK(p.is_contiguous(), invalid_argument, op, "parameter ", i, " of shape ", p.shape(),
                " is not contiguous");
    // A leaf that does not require grad (a frozen one) is accepted, as libtorch
    // does: it has no .grad, so steps skip it until it requires grad again.
    FORGE_CHECK(p.is_leaf(), invalid_argument, op, "parameter ", i, " must be a leaf (not the output of an op)");
  }
  check_disjoint(op, params);
}

}  // namespace

Tensor scalar_tensor(Runtime& rt, double value, DType dtype, const char* op) {
  Tensor t = detail::allocate_in(rt, rt.pool(), Shape{}, dtype, op);  // on the host, as libtorch keeps `step`
  if (dtype == DType::i64)
    *t.data_ptr<std::int64_t>() = static_cast<std::int64_t>(value);
  else
    *t.data_ptr<double>() = value;
  return t;
}

std::string group_key(std::size_t group, std::size_t groups, const std::string& name) {
  return groups == 1 ? name : "group." + std::to_string(group) + "." + name;
}

const Tensor& DictReader::find(const std::string& key) {
  const auto it = dict_.find(key);
  FORGE_CHECK(it != dict_.end() && it->second.defined(), invalid_argument, op_, "state dict has no tensor '", key, "'");
  read_.insert(key);
  return it->second;
}

double DictReader::scalar(const std::string& key) {
  const Tensor& t = find(key);
  FORGE_CHECK(t.dim() == 0, shape, op_, "key '", key, "' holds shape ", t.shape(), ", not a 0-d tensor");
  return t.item<double>();
}

std::int64_t DictReader::count(const std::string& key) {
  const double v = scalar(key);
  FORGE_CHECK(v >= 0 && v <= 9007199254740992.0 && v == std::floor(v), invalid_argument, op_, "key '", key, "' holds ",
              v, ", not a step count");
  return static_cast<std::int64_t>(v);
}

void DictReader::finish(const std::string& what) const {
  for (const auto& [key, tensor] : dict_)
    FORGE_CHECK(read_.count(key) == 1, invalid_argument, op_, "unexpected key '", key, "' (", what, ")");
}

Optimizer::Optimizer(std::vector<Tensor> params, std::string name)
    : params_(std::move(params)), group_begin_{0}, name_(std::move(name)) {
  try {
    group_begin_.push_back(params_.size());
    check_params(name_.c_str(), params_);
    param_steps_.assign(params_.size(), 0);
  }
  FORGE_CATCH_OOM(name_.c_str())
}

Optimizer::Optimizer(const std::vector<ParamGroup>& groups, std::string name)
    : group_begin_{0}, name_(std::move(name)) {
  try {
    FORGE_CHECK(!groups.empty(), invalid_argument, name_, "got no parameter groups");
    for (const ParamGroup& g : groups) {
      params_.insert(params_.end(), g.params.begin(), g.params.end());
      group_begin_.push_back(params_.size());
    }
    check_params(name_.c_str(), params_);
    param_steps_.assign(params_.size(), 0);
  }
  FORGE_CATCH_OOM(name_.c_str())
}

std::size_t Optimizer::checked_group(std::size_t group) const {
  FORGE_CHECK(group < num_groups(), out_of_range, name_, "parameter group ", group, " of ", num_groups());
  return group;
}

std::vector<Tensor> Optimizer::group_params(std::size_t group) const try {
  checked_group(group);
  return {params_.begin() + static_cast<std::ptrdiff_t>(group_begin_[group]),
          params_.begin() + static_cast<std::ptrdiff_t>(group_begin_[group + 1])};
}
FORGE_CATCH_OOM(name_.c_str())

std::size_t Optimizer::group_of(std::size_t param) const {
  checked(param);
  // group_begin_ is sorted; the group is the last one starting at or before param (empty groups skipped).
  const auto it = std::upper_bound(group_begin_.begin(), group_begin_.end(), param);
  return static_cast<std::size_t>(it - group_begin_.begin()) - 1;
}

void Optimizer::set_lr(double lr) {
  FORGE_CHECK(lr >= 0, invalid_argument, name_, "lr ", lr, " is negative");
  for (std::size_t g = 0; g < num_groups(); ++g) set_lr(g, lr);
}

Optimizer::~Optimizer() = default;

void Optimizer::init_state(std::initializer_list<std::string_view> slots) try {
  slots_.assign(slots.begin(), slots.end());
  state_.resize(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i)
    for (std::size_t j = 0; j < slots_.size(); ++j)
      state_[i].push_back(owned_zeros(params_[i].runtime(), params_[i].shape(), params_[i].dtype(), name_.c_str()));
}
FORGE_CATCH_OOM(name_.c_str())

std::vector<Tensor> packed_grads(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined() && (!g.is_contiguous() || g.dtype() != p.dtype())) g = g.contiguous().to(p.dtype());
    grads.push_back(std::move(g));
  }
  return grads;
}

std::size_t Optimizer::checked(std::size_t param) const {
  FORGE_CHECK(param < params_.size(), out_of_range, name_, "parameter ", param, " of ", params_.size());
  return param;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (Tensor& p : params_) p.zero_grad(set_to_none);
}

StateDict Optimizer::state_dict() const try {
  Runtime& rt = params_[0].runtime();
  const char* op = name_.c_str();
  StateDict dict;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    for (std::size_t j = 0; j < slots_.size(); ++j) dict.emplace(state_key(i, slots_[j]), state_[i][j]);
    dict.emplace(state_key(i, "step"), scalar_tensor(rt, static_cast<double>(param_steps_[i]), DType::i64, op));
  }
  dict.emplace("step", scalar_tensor(rt, static_cast<double>(steps_), DType::i64, op));
  for (std::size_t g = 0; g < num_groups(); ++g) {
    for (const auto& [name, value] : hyperparameters(g))
      dict.emplace(group_key(g, num_groups(), name), scalar_tensor(rt, value, DType::f64, op));
    if (num_groups() > 1)
      dict.emplace(group_key(g, num_groups(), "size"),
                   scalar_tensor(rt, static_cast<double>(group_begin_[g + 1] - group_begin_[g]), DType::i64, op));
  }
  return dict;
}
FORGE_CATCH_OOM(name_.c_str())

void Optimizer::load_state_dict(const StateDict& dict) try {
  DictReader read(dict, name_ + ".load_state_dict");
  const std::string& op = read.op();
  auto find = [&](const std::string& key) -> const Tensor& { return read.find(key); };
  auto scalar = [&](const std::string& key) { return read.scalar(key); };
  auto count = [&](const std::string& key) { return read.count(key); };

  // Check everything first: a refused dict leaves this optimizer as it was.
  const std::size_t groups = num_groups();
  std::vector<std::vector<double>> values(groups);
  for (std::size_t g = 0; g < groups; ++g) {
    for (const auto& [name, value] : hyperparameters(g)) values[g].push_back(scalar(group_key(g, groups, name)));
    load_hyperparameters(g, values[g], op.c_str(), false);
    if (groups == 1) continue;
    const std::string key = group_key(g, groups, "size");
    const std::int64_t size = count(key);
    const std::size_t own = group_begin_[g + 1] - group_begin_[g];
    FORGE_CHECK(static_cast<std::size_t>(size) == own, invalid_argument, op, "key '", key, "' holds ", size,
                ", parameter group ", g, " has ", own, " parameters");
  }
  const std::int64_t steps = count("step");
  std::vector<std::int64_t> param_steps;
  std::vector<std::vector<Tensor>> sources(params_.size());
  autograd::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    param_steps.push_back(count(state_key(i, "step")));
    const Tensor& p = params_[i];
    for (const std::string& slot : slots_) {
      const std::string key = state_key(i, slot);
      const Tensor& t = find(key);
      FORGE_CHECK(t.shape() == p.shape(), shape, op, "key '", key, "' has shape ", t.shape(), ", parameter ", i,
                  " has shape ", p.shape());
      FORGE_CHECK(t.dtype() == p.dtype(), dtype, op, "key '", key, "' holds ", dtype_name(t.dtype()), ", parameter ", i,
                  " is ", dtype_name(p.dtype()));
      sources[i].push_back(detail::packed_where_it_is(t, op.c_str()));  // from the host or the device
    }
  }
  read.finish("this optimizer has " + std::to_string(params_.size()) + " parameters in " + std::to_string(groups) +
              (groups == 1 ? " group" : " groups"));

  // Adopt: copy the bytes (the dict may alias this optimizer's own state).
  for (std::size_t i = 0; i < params_.size(); ++i) {
    for (std::size_t j = 0; j < slots_.size(); ++j) {
      const Tensor& src = sources[i][j];
      if (!src.device().is_cpu() || !state_[i][j].device().is_cpu()) {  // a transfer, or a device copy
        autograd::NoGradGuard no_grad;
        state_[i][j].copy_(src);
        continue;
      }
      void* dst = state_[i][j].raw_data(op.c_str());
      const void* from = src.raw_data(op.c_str());
      if (dst != from && src.nbytes() > 0) std::memcpy(dst, from, src.nbytes());
    }
  }
  param_steps_ = std::move(param_steps);
  steps_ = steps;
  for (std::size_t g = 0; g < groups; ++g) load_hyperparameters(g, values[g], op.c_str(), true);
}
FORGE_CATCH_OOM(name_.c_str())

}  // namespace forge::optim
