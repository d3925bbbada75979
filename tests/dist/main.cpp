// The runner of the distributed tests (label "mpi"): every rank of
// `mpirun -np 2 forge_dist_tests` runs the same cases in the same order, so
// their collectives match. Each rank's report is prefixed by its rank.

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>

int main(int argc, char* argv[]) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  std::printf("forge_dist_tests: rank %s of %s\n", rank ? rank : "0", rank ? std::getenv("OMPI_COMM_WORLD_SIZE") : "1");
  return Catch::Session().run(argc, argv);
}
