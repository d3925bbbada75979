// Checkpoints in a data-parallel job: rank 0 writes, every rank reads, and a
// failure anywhere is an error everywhere (one small collective after each).

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/tensor_internal.h"
#include "forge/distributed/checkpoint.h"
#include "forge/error.h"
#include "forge/runtime.h"

namespace forge::dist {

namespace {

// Each rank's message (empty: it succeeded), truncated, gathered on every rank.
constexpr std::int64_t kMessageBytes = 480;

// A u8 tensor of `bytes` for the group's engine (host for MPI, the context's
// device for NCCL), holding `text`.
Tensor text_tensor(ProcessGroup& group, const std::string& text) {
  Runtime& rt = group.context().runtime();
  Tensor host =
      forge::detail::allocate_in(rt, rt.pool(Device::cpu(), "checkpoint"), {kMessageBytes}, DType::u8, "checkpoint");
  auto* p = static_cast<std::uint8_t*>(host.raw_data());
  std::memset(p, 0, kMessageBytes);
  std::memcpy(p, text.data(), std::min<std::size_t>(text.size(), kMessageBytes - 1));
  return group.backend() == Backend::nccl ? host.to(group.context().device()) : host;
}

// Gathers every rank's error text; throws on every rank if one is not empty.
void agree_on_failure(ProcessGroup& group, const char* op, const std::string& mine, std::exception_ptr own) {
  Tensor all = group.all_gather(text_tensor(group, mine));
  const std::vector<std::uint8_t> bytes = all.to_vector<std::uint8_t>();
  for (int r = 0; r < group.size(); ++r) {
    const char* text = reinterpret_cast<const char*>(bytes.data() + r * kMessageBytes);
    if (!*text) continue;
    if (own) std::rethrow_exception(own);
    FORGE_FAIL(distributed, op, "rank ", r, " failed: ", std::string(text, strnlen(text, kMessageBytes)));
  }
}

}  // namespace

void save_checkpoint(ProcessGroup& group, const std::filesystem::path& path, const train::Checkpoint& what) {
  std::string error;
  std::exception_ptr own;
  if (group.is_main()) {
    try {
      train::save_checkpoint(path, what);
    } catch (const std::exception& e) {
      error = e.what();
      own = std::current_exception();
    }
  }
  agree_on_failure(group, "save_checkpoint", error, own);
}

train::Checkpoint load_checkpoint(ProcessGroup& group, const std::filesystem::path& path,
                                  const train::Checkpoint& into) {
  std::string error;
  std::exception_ptr own;
  train::Checkpoint loaded;
  try {
    loaded = train::load_checkpoint(path, into);
  } catch (const std::exception& e) {
    error = e.what();
    own = std::current_exception();
  }
  agree_on_failure(group, "load_checkpoint", error, own);
  return loaded;
}

}  // namespace forge::dist
