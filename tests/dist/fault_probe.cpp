// The fault cases of the distributed tests, each ending its job on purpose
// (tests/CMakeLists.txt checks what the job prints, and that it ends within
// the test's timeout rather than hanging):
//   timeout: rank 1 takes a different path (it never joins the all_reduce);
//            rank 0's wait throws ErrorCode::distributed after 2 s, and its
//            broken group then ends the job.
//   throw:   rank 1 throws with its group alive; the group's destructor ends
//            the job, and rank 0, waiting in an all_reduce, is stopped.
//   die:     rank 1 exits mid-run; mpirun stops rank 0.
//
//   mpirun -np 2 --allow-run-as-root --oversubscribe forge_dist_fault_probe timeout|throw|die

#include <forge/forge.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

using namespace forge;
using Clock = std::chrono::steady_clock;

namespace {

void step_that_fails() { throw Error(ErrorCode::invalid_argument, "fault probe: rank 1's step failed"); }

int timeout_case(ExecContext& ctx) {
  dist::ProcessGroup group(ctx, {.timeout = std::chrono::seconds(2)});
  Tensor t = ctx.ones({16});
  if (group.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(40));  // ended by rank 0's abort long before
    return 1;
  }
  const auto start = Clock::now();
  try {
    group.all_reduce(t);
  } catch (const Error& e) {
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (e.code() == ErrorCode::distributed && s < 10)
      std::printf("fault probe: rank 0 got ErrorCode::distributed within the timeout (%.1f s): %s\n", s, e.what());
    std::fflush(stdout);
    return 0;  // the broken group's destructor ends the job
  }
  std::printf("fault probe: the all_reduce returned without its peer\n");
  return 1;
}

int throw_case(ExecContext& ctx) {
  try {
    dist::ProcessGroup group(ctx, {.timeout = std::chrono::seconds(50)});
    Tensor t = ctx.ones({16});
    if (group.rank() == 1) step_that_fails();
    group.all_reduce(t);
    std::printf("fault probe: rank 0's all_reduce returned without its peer\n");
    return 1;
  } catch (const Error& e) {
    std::printf("fault probe: rank caught %s\n", e.what());
    return 1;
  }
}

int die_case(ExecContext& ctx) {
  dist::ProcessGroup group(ctx, {.timeout = std::chrono::seconds(50)});
  Tensor t = ctx.ones({16});
  group.all_reduce(t);  // both alive here
  if (group.rank() == 1) {
    std::printf("fault probe: rank 1 dies\n");
    std::fflush(stdout);
    std::_Exit(3);
  }
  group.all_reduce(t);
  std::printf("fault probe: rank 0's all_reduce returned without its peer\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "";
  ExecContext ctx;
  if (which == "timeout") return timeout_case(ctx);
  if (which == "throw") return throw_case(ctx);
  if (which == "die") return die_case(ctx);
  std::fprintf(stderr, "usage: forge_dist_fault_probe timeout|throw|die\n");
  return 2;
}
