// The NCCL engine of a build made without it (FORGE_NCCL=OFF, no CUDA
// backend, or no NCCL found): a group asked for NCCL says how to build it.

#include <memory>

#include "distributed/comm.h"
#include "forge/error.h"

namespace forge::dist::detail {

bool nccl_built() noexcept { return false; }

std::unique_ptr<Comm> make_nccl_comm(ExecContext&, const ProcessGroupOptions&, Comm*) {
  FORGE_FAIL(not_implemented, "ProcessGroup",
             "forge was built without NCCL (configure with the CUDA backend and FORGE_NCCL=ON, NCCL from the CUDA "
             "Toolkit or NCCL_ROOT)");
}

}  // namespace forge::dist::detail
