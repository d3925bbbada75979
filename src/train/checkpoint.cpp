#include "forge/train/checkpoint.h"

#include <charconv>
#include <functional>
#include <random>
#include <sstream>
#include <utility>

#include "forge/autograd.h"
#include "forge/error.h"
#include "runtime/runtime_internal.h"

namespace forge::train {

namespace {

constexpr const char* kFormat = "forge.checkpoint";
constexpr const char* kFormatVersion = "1";

// The dict's entries under "<prefix>.", with the prefix taken off.
StateDict strip(const StateDict& all, const std::string& prefix) {
  StateDict out;
  for (const auto& [key, t] : all)
    if (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0)
      out.emplace(key.substr(prefix.size()), t);
  return out;
}

void add(StateDict& into, const std::string& prefix, const StateDict& part) {
  for (const auto& [key, t] : part) into.emplace(prefix + key, t);
}

// Detached copies, to put a part back if a later part refuses the file.
StateDict snapshot(const StateDict& dict) {
  autograd::NoGradGuard no_grad;
  StateDict out;
  for (const auto& [key, t] : dict) out.emplace(key, t.detach().clone());
  return out;
}

const std::string& entry(const io::Metadata& m, const std::string& key, const char* op,
                         const std::filesystem::path& path) {
  const auto it = m.find(key);
  FORGE_CHECK(it != m.end(), invalid_argument, op, path.string(), " has no '", key, "' entry");
  return it->second;
}

std::int64_t integer(const io::Metadata& m, const std::string& key, const char* op, const std::filesystem::path& path) {
  const std::string& text = entry(m, key, op, path);
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  FORGE_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= 0, invalid_argument, op, path.string(),
              ": '", key, "' holds '", text, "', not a count");
  return v;
}

std::mt19937_64 parse_rng(const std::string& state, const char* op) {
  std::mt19937_64 rng;
  std::istringstream in(state);
  in >> rng;
  FORGE_CHECK(!in.fail() && (in >> std::ws).eof(), invalid_argument, op,
              "the text is not the state of a random generator (mt19937_64)");
  return rng;
}

// The part `name` of `into` is asked for and the file has it (its metadata says whose it is).
void require_part(const io::Metadata& m, const std::string& key, const std::string& want, const char* op,
                  const std::filesystem::path& path) {
  const auto it = m.find(key);
  FORGE_CHECK(it != m.end(), invalid_argument, op, path.string(), " holds no ", key.substr(6), " state");
  FORGE_CHECK(it->second == want, invalid_argument, op, path.string(), " holds the state of a ", it->second, " ",
              key.substr(6), ", not of a ", want);
}

}  // namespace

std::string rng_state(ExecContext& ctx) try {
  auto rng = ctx.runtime().generator().lease("rng_state");
  std::ostringstream out;
  out << *rng;
  return out.str();
}
FORGE_CATCH_OOM("rng_state")

void set_rng_state(ExecContext& ctx, const std::string& state) try {
  const std::mt19937_64 parsed = parse_rng(state, "set_rng_state");
  auto rng = ctx.runtime().generator().lease("set_rng_state");
  *rng = parsed;
}
FORGE_CATCH_OOM("set_rng_state")

void save_checkpoint(const std::filesystem::path& path, const Checkpoint& what) try {
  const char* op = "save_checkpoint";
  FORGE_CHECK(what.step >= 0 && what.position.epoch >= 0 && what.position.batch >= 0, invalid_argument, op, "step ",
              what.step, ", epoch ", what.position.epoch, " and batch ", what.position.batch, " must not be negative");
  StateDict tensors;
  io::Metadata meta;
  for (const auto& [key, value] : what.metadata) meta.emplace(std::string("user.").append(key), value);
  meta.insert_or_assign(kFormat, std::string(kFormatVersion));
  meta["forge.step"] = std::to_string(what.step);
  meta["forge.epoch"] = std::to_string(what.position.epoch);
  meta["forge.batch"] = std::to_string(what.position.batch);
  if (what.model != nullptr) {
    add(tensors, "model.", what.model->state_dict());
    meta["forge.model"] = what.model->type_name();
  }
  if (what.optimizer != nullptr) {
    add(tensors, "optimizer.", what.optimizer->state_dict());
    meta["forge.optimizer"] = what.optimizer->name();
  }
  if (what.schedule != nullptr) {
    add(tensors, "schedule.", what.schedule->state_dict());
    meta["forge.schedule"] = what.schedule->name();
  }
  if (what.context != nullptr) meta["forge.rng"] = rng_state(*what.context);
  io::save_safetensors(path, tensors, meta);
}
FORGE_CATCH_OOM("save_checkpoint")

Checkpoint load_checkpoint(const std::filesystem::path& path, const Checkpoint& into) try {
  const char* op = "load_checkpoint";
  // The model's tensors must come from its own context: read on `context`, else the current one.
  ExecContext& ctx = into.context != nullptr ? *into.context : ExecContext::current_or_throw(op);
  const io::SafetensorsContents file = io::read_safetensors(ctx, path);
  const io::Metadata& m = file.metadata;
  const auto format = m.find(kFormat);
  FORGE_CHECK(format != m.end() && format->second == kFormatVersion, invalid_argument, op, path.string(),
              " is not a forge checkpoint (version ", kFormatVersion, ")");

  // Check what can be checked without loading, before anything changes.
  Checkpoint out = into;
  out.step = integer(m, "forge.step", op, path);
  out.position = {integer(m, "forge.epoch", op, path), integer(m, "forge.batch", op, path)};
  out.metadata.clear();
  for (const auto& [key, value] : m)
    if (key.rfind("user.", 0) == 0) out.metadata.emplace(key.substr(5), value);
  if (into.model != nullptr) require_part(m, "forge.model", into.model->type_name(), op, path);
  if (into.optimizer != nullptr) require_part(m, "forge.optimizer", into.optimizer->name(), op, path);
  if (into.schedule != nullptr) require_part(m, "forge.schedule", into.schedule->name(), op, path);
  std::mt19937_64 rng;
  if (into.context != nullptr) rng = parse_rng(entry(m, "forge.rng", op, path), op);

  // Each load checks its part before writing it; a later part's refusal puts the earlier ones back.
  std::vector<std::function<void()>> undo;
  try {
    if (into.model != nullptr) {
      StateDict before = snapshot(into.model->state_dict());
      into.model->load_state_dict(strip(file.tensors, "model."));
      undo.emplace_back([model = into.model, before = std::move(before)] { model->load_state_dict(before); });
    }
    if (into.optimizer != nullptr) {
      StateDict before = snapshot(into.optimizer->state_dict());
      into.optimizer->load_state_dict(strip(file.tensors, "optimizer."));
      undo.emplace_back([opt = into.optimizer, before = std::move(before)] { opt->load_state_dict(before); });
    }
    if (into.schedule != nullptr) into.schedule->load_state_dict(strip(file.tensors, "schedule."));
  } catch (...) {
    for (auto it = undo.rbegin(); it != undo.rend(); ++it) (*it)();
    throw;
  }
  if (into.context != nullptr) *into.context->runtime().generator().lease(op) = rng;
  return out;
}
FORGE_CATCH_OOM("load_checkpoint")

}  // namespace forge::train
