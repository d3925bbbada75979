// forge::dist in the ordinary test binary (one process, no mpirun): the
// autograd seam DataParallel stands on (queue_callback, current_pass), the
// stub's error in a build without MPI, and a group of one with it. The
// collectives across processes are tests/dist/ (ctest label "mpi").

#include <forge/forge.h>

#include <catch2/catch.hpp>

using namespace forge;

TEST_CASE("autograd: queue_callback runs once the pass has committed its gradients", "[autograd]") {
  ExecContext ctx;
  Tensor w = ctx.ones({3}).requires_grad_();
  Tensor v = ctx.ones({2}).requires_grad_();
  std::vector<std::string> order;
  std::uint64_t seen_pass = 0;
  auto h = w.register_post_accumulate_grad_hook([&](const Tensor&) {
    seen_pass = autograd::current_pass();
    order.push_back("hook");
    autograd::queue_callback([&] {
      // v's gradient is committed at the end of the pass: the callback sees it.
      order.push_back(v.grad().defined() ? "callback after v" : "callback before v");
      autograd::queue_callback([&] { order.push_back("queued by a callback"); });
    });
  });
  ((w * 2.0).sum() + (v * 3.0).sum()).backward();
  CHECK(seen_pass != 0);
  CHECK(autograd::current_pass() == 0);
  CHECK(order == std::vector<std::string>{"hook", "callback after v", "queued by a callback"});
  try {
    autograd::queue_callback([] {});
    FAIL("queue_callback outside a pass was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::backward);
  }
  // Each pass has its own number.
  std::uint64_t second = 0;
  h.remove();
  auto h2 = w.register_post_accumulate_grad_hook([&](const Tensor&) { second = autograd::current_pass(); });
  (w * 2.0).sum().backward();
  CHECK(second != 0);
  CHECK(second != seen_pass);
}

TEST_CASE("dist: a process group needs an engine, or says how to build one", "[dist]") {
  ExecContext ctx;
  if (!dist::available(dist::Backend::mpi)) {
    try {
      dist::ProcessGroup group(ctx);
      FAIL("a group was made without MPI");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::not_implemented);
      CHECK_THAT(e.what(), Catch::Contains("FORGE_MPI") && Catch::Contains("libopenmpi-dev"));
    }
  } else {
    // Without mpirun: a group of one, whose collectives are the identity.
    dist::ProcessGroup group(ctx);
    CHECK(group.size() == 1);
    CHECK(group.rank() == 0);
    Tensor t = ctx.from_vector(std::vector<float>{1, 2, 3});
    group.all_reduce(t, dist::ReduceOp::mean);
    CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3});
    CHECK(group.all_gather(t).shape() == Shape{1, 3});
  }
  // NCCL works on CUDA tensors only: a CPU context is refused either way.
  try {
    dist::ProcessGroup group(ctx, {.backend = dist::Backend::nccl});
    FAIL("an NCCL group on the host was made");
  } catch (const Error& e) {
    CHECK((e.code() == ErrorCode::device || e.code() == ErrorCode::not_implemented));
  }
  CHECK(std::string(dist::to_string(dist::ReduceOp::mean)) == "mean");
  CHECK(std::string(dist::to_string(dist::Backend::nccl)) == "nccl");
}
