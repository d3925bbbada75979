// The MPI engine of forge::dist (Open MPI): host collectives.
//
// Policy:
//   - MPI is initialised once per process, at the first group, with
//     MPI_THREAD_MULTIPLE (each group calls MPI from its own thread), and
//     finalised at exit when forge initialised it. A process that called
//     MPI_Init itself keeps ownership.
//   - Each group duplicates MPI_COMM_WORLD (its collectives never match
//     another group's) and makes every call on one thread of its own, in the
//     order the user issued them (Note [One thread per group]).
//   - MPI errors return (MPI_ERRORS_RETURN) and become ErrorCode::distributed
//     with MPI's text; counts past INT_MAX are split into calls that fit.
//   - mean is a sum divided by the group's size on the group's thread; f16
//     and bf16 reduce through user-defined MPI ops that add in f32.

#include <mpi.h>

#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "distributed/comm.h"
#include "forge/error.h"

namespace forge::dist::detail {

bool mpi_built() noexcept { return true; }

namespace {

std::string mpi_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len));
}

void check_mpi(int code, const char* what) {
  if (code != MPI_SUCCESS) FORGE_FAIL(distributed, what, "MPI failed: ", mpi_text(code));
}

// ---- f16 and bf16 reductions, in f32 ----

template <typename Half16, typename Combine>
void reduce16(void* in, void* inout, int* len, Combine combine) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = Half16::from_float(combine(Half16::to_float(a[i]), Half16::to_float(b[i])));
}

constexpr auto add = [](float x, float y) { return x + y; };
constexpr auto larger = [](float x, float y) { return x != x ? x : (y != y ? y : (x > y ? x : y)); };
constexpr auto smaller = [](float x, float y) { return x != x ? x : (y != y ? y : (x < y ? x : y)); };

void bf16_sum(void* in, void* io, int* n, MPI_Datatype*) { reduce16<BFloat16>(in, io, n, add); }
void bf16_max(void* in, void* io, int* n, MPI_Datatype*) { reduce16<BFloat16>(in, io, n, larger); }
void bf16_min(void* in, void* io, int* n, MPI_Datatype*) { reduce16<BFloat16>(in, io, n, smaller); }
void f16_sum(void* in, void* io, int* n, MPI_Datatype*) { reduce16<Half>(in, io, n, add); }
void f16_max(void* in, void* io, int* n, MPI_Datatype*) { reduce16<Half>(in, io, n, larger); }
void f16_min(void* in, void* io, int* n, MPI_Datatype*) { reduce16<Half>(in, io, n, smaller); }

// MPI for the whole process.
class MpiProcess {
 public:
  static MpiProcess& get() {
    static MpiProcess process;
    return process;
  }
  MPI_Op half_op(DType dtype, ReduceOp op) const {
    const int i = (dtype == DType::bf16 ? 0 : 3) + (op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : 0);
    return half_ops_[i];
  }
  int world_rank() const noexcept { return rank_; }
  int world_size() const noexcept { return size_; }

 private:
  MpiProcess() {
    int initialized = 0;
    check_mpi(MPI_Initialized(&initialized), "ProcessGroup");
    if (!initialized) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "ProcessGroup");
      owned_ = true;
      if (provided < MPI_THREAD_MULTIPLE) MPI_Finalize();  // not left half set up
      FORGE_CHECK(provided >= MPI_THREAD_MULTIPLE, distributed, "ProcessGroup", "this MPI library gives thread level ",
                  provided, ", and forge needs MPI_THREAD_MULTIPLE (Open MPI 4 from Debian has it)");
    } else {
      int provided = 0;
      MPI_Query_thread(&provided);
      FORGE_CHECK(provided >= MPI_THREAD_MULTIPLE, distributed, "ProcessGroup",
                  "MPI was initialised with thread level ", provided,
                  "; call MPI_Init_thread with MPI_THREAD_MULTIPLE, or let forge initialise MPI");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_User_function* fns[6] = {bf16_sum, bf16_max, bf16_min, f16_sum, f16_max, f16_min};
    for (int i = 0; i < 6; ++i) check_mpi(MPI_Op_create(fns[i], 1, &half_ops_[i]), "ProcessGroup");
  }
  ~MpiProcess() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Op& op : half_ops_) MPI_Op_free(&op);
    if (owned_) MPI_Finalize();
  }

  bool owned_ = false;
  int rank_ = 0;
  int size_ = 1;
  MPI_Op half_ops_[6] = {};
};

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16:
      return MPI_UINT16_T;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
    case DType::boolean:
      return MPI_UINT8_T;
    case DType::i8:
      return MPI_INT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  if (dtype == DType::f16 || dtype == DType::bf16) return MpiProcess::get().half_op(dtype, op);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  return MPI_OP_NULL;
}

// Divides n elements at p by d (mean after a sum).
void divide(void* p, std::int64_t n, DType dtype, int d) {
  const double inv = 1.0 / d;
  switch (dtype) {
    case DType::f32: {
      auto* x = static_cast<float*>(p);
      for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * inv);
      break;
    }
    case DType::f64: {
      auto* x = static_cast<double*>(p);
      for (std::int64_t i = 0; i < n; ++i) x[i] *= inv;
      break;
    }
    case DType::bf16: {
      auto* x = static_cast<std::uint16_t*>(p);
      for (std::int64_t i = 0; i < n; ++i)
        x[i] = BFloat16::from_float(static_cast<float>(BFloat16::to_float(x[i]) * inv));
      break;
    }
    case DType::f16: {
      auto* x = static_cast<std::uint16_t*>(p);
      for (std::int64_t i = 0; i < n; ++i) x[i] = Half::from_float(static_cast<float>(Half::to_float(x[i]) * inv));
      break;
    }
    default:
      break;
  }
}

// The largest element count of one MPI call.
constexpr std::int64_t kChunk = INT_MAX / 2;

// Note [One thread per group]
// MPI collectives block, and forge's async collectives must overlap with the
// caller's work (a backward pass that goes on while gradients are reduced).
// So each group owns a thread that runs its calls in the order they were
// issued (the order that matches them across ranks); the caller waits on the
// WorkState. MPI's own non-blocking collectives would only progress inside
// MPI calls, which nothing makes while the caller computes.
class MpiComm final : public Comm {
 public:
  explicit MpiComm(const ProcessGroupOptions& options) {
    MpiProcess& process = MpiProcess::get();
    rank_ = process.world_rank();
    size_ = process.world_size();
    thread_ = std::thread([this] { serve(); });
    auto state = WorkState::make("ProcessGroup (duplicating MPI_COMM_WORLD)", options.timeout);
    post_work(state, [this] {
      check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "ProcessGroup");
      check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "ProcessGroup");
    });
    try {
      state->wait();
    } catch (...) {
      if (state->broken->load()) abort("forge::dist: the ranks did not all construct the group in time");
      stop();
      throw;
    }
  }

  ~MpiComm() override {
    post([this] {
      int finalized = 0;
      MPI_Finalized(&finalized);  // a group that outlives main's statics must not call MPI after MPI_Finalize
      if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
    });
    stop();
  }

  Backend backend() const noexcept override { return Backend::mpi; }
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  bool on_device() const noexcept override { return false; }

  std::string unsupported(Kind kind, DType dtype, ReduceOp op) const override {
    if (kind != Kind::all_reduce && kind != Kind::reduce_scatter) return "";
    if (dtype == DType::boolean && op == ReduceOp::sum) return "a sum of bool tensors: reduce them as u8 or i32";
    return "";
  }

  void start(const Collective& c, const std::shared_ptr<WorkState>& state) override {
    FORGE_CHECK((c.kind != Kind::all_gather && c.kind != Kind::reduce_scatter) || c.count <= INT_MAX, not_implemented,
                to_string(c.kind), "more than 2^31 - 1 elements per rank in one call; split the tensor");
    post_work(state, [this, c] { run(c); });
  }

  [[noreturn]] void abort(const std::string& why) noexcept override {
    std::fprintf(stderr, "%s\n", why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  }

 private:
  // call(pointer, count) over c.recv's elements in counts MPI can take.
  template <typename Call>
  static void in_chunks(const Collective& c, Call call) {
    const std::size_t elem = dtype_size(c.dtype);
    for (std::int64_t at = 0; at < c.count; at += kChunk)
      check_mpi(call(static_cast<char*>(c.recv) + at * elem, static_cast<int>(std::min(kChunk, c.count - at))),
                to_string(c.kind));
  }

  void run(const Collective& c) {
    const char* what = to_string(c.kind);
    const MPI_Datatype type = mpi_type(c.dtype);
    switch (c.kind) {
      case Kind::barrier:
        check_mpi(MPI_Barrier(comm_), what);
        return;
      case Kind::broadcast:
        in_chunks(c, [&](void* p, int n) { return MPI_Bcast(p, n, type, c.root, comm_); });
        return;
      case Kind::all_reduce:
        in_chunks(
            c, [&](void* p, int n) { return MPI_Allreduce(MPI_IN_PLACE, p, n, type, mpi_op(c.dtype, c.op), comm_); });
        break;
      case Kind::all_gather:
        check_mpi(
            MPI_Allgather(c.send, static_cast<int>(c.count), type, c.recv, static_cast<int>(c.count), type, comm_),
            what);
        return;
      case Kind::reduce_scatter:
        check_mpi(
            MPI_Reduce_scatter_block(c.send, c.recv, static_cast<int>(c.count), type, mpi_op(c.dtype, c.op), comm_),
            what);
        break;
    }
    if (c.op == ReduceOp::mean && size_ > 1) divide(c.recv, c.count, c.dtype, size_);
  }

  // Runs `body` on the group's thread, then completes `state` with its outcome.
  template <typename Body>
  void post_work(const std::shared_ptr<WorkState>& state, Body body) {
    post([state, body = std::move(body)] {
      try {
        body();
        state->complete();
      } catch (...) {
        state->complete(std::current_exception());
      }
    });
  }

  void post(std::function<void()> task) {
    {
      std::lock_guard lock(m_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

  void serve() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  void stop() {
    {
      std::lock_guard lock(m_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  int rank_ = 0;
  int size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_comm(const ProcessGroupOptions& options) { return std::make_unique<MpiComm>(options); }

}  // namespace forge::dist::detail
