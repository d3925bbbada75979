// The MPI engine of a build made without it (FORGE_MPI=OFF, or no MPI found
// at configure time): ProcessGroup says how to get it.

#include "distributed/comm.h"
#include "forge/error.h"

namespace forge::dist::detail {

bool mpi_built() noexcept { return false; }

std::unique_ptr<Comm> make_mpi_comm(const ProcessGroupOptions&) {
  FORGE_FAIL(not_implemented, "ProcessGroup",
             "this build of forge has no MPI engine: install Open MPI (Debian: libopenmpi-dev openmpi-bin, "
             "which scripts/setup installs) and configure with FORGE_MPI=AUTO or ON");
}

}  // namespace forge::dist::detail
