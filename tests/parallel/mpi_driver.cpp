// test_parallel_mpi: every collective of the MPI Communicator (the context-parallel
// all_to_all included), the process groups and the SDP K/V exchange (with its
// refusal of a span that does not divide over the ranks) on P ranks (run by CTest as
// `mpirun -np 2 ...` and `-np 4`), plus the fault modes `--fault throw` and `--fault hang`
// that must end the whole job non-zero with the failing rank's message. A failed check
// throws; run_guarded turns it into MPI_Abort. With --device cuda the same checks run
// through NCCL; DRIFTLESS_GPU_REQUIRED=1 makes a GPU that cannot be opened a failure, not a skip.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "engine/core/device_ops.h"
#include "engine/core/env.h"
#include "parallel/kv_exchange.h"
#include "parallel/mpi_communicator.h"
#include "parallel/process_group.h"

using namespace driftless;
using namespace driftless::parallel;

namespace {

int g_checks = 0;
Device g_device = Device::cpu;  // cuda: the same checks through NCCL (--device cuda)
#define CHECK(cond, stream_expr)                                                   \
  do {                                                                             \
    ++g_checks;                                                                    \
    DL_CHECK(cond, "mpi_driver",                                                   \
             __FILE__ << ":" << __LINE__ << ": " << #cond << ": " << stream_expr); \
  } while (0)

// Rank-dependent values that stay exact in every dtype (small integers and halves), with
// a large one in the mix so float sums depend on the order.
double value(int rank, int64_t i, DType dtype) {
  const double v = double((rank * 37 + i * 11) % 23) - 11.0;
  if (!is_floating(dtype)) return v;
  if (dtype == DType::bf16) return v * 0.5;
  return (i % 5 == 0 ? (rank % 2 ? -1.0e8 : 1.0e8) : 0.0) + v * 0.5 + 0.25 * rank;
}

Tensor filled(int rank, int64_t n, DType dtype, int64_t first = 0) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value(rank, first + i, dtype);
  return Tensor::from_vector<double>(v).to(g_device, dtype);
}

// Σ over ranks in rank order, accumulated in the dtype (float for bf16), as a double.
double rank_order_sum(int ranks, int64_t i, DType dtype) {
  return visit_dtype(dtype, [&](auto tag) -> double {
    using T = decltype(tag);
    using Acc = std::conditional_t<std::is_same_v<T, bf16>, float, T>;
    Acc acc = convert<Acc>(convert<T>(value(0, i, dtype)));
    for (int r = 1; r < ranks; ++r) acc += convert<Acc>(convert<T>(value(r, i, dtype)));
    return convert<double>(convert<T>(acc));
  });
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu).contiguous(), y = b.to(Device::cpu).contiguous();
  return x.nbytes() == y.nbytes() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

void expect_values(const char* what, const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = got.to_vector<double>();
  CHECK(g.size() == want.size(), what << ": " << g.size() << " values, want " << want.size());
  for (size_t i = 0; i < g.size(); ++i)
    CHECK(g[i] == want[i], what << " (" << dtype_name(got.dtype()) << ") element " << i << ": got "
                                << g[i] << ", want " << want[i]);
}

void test_collectives(Communicator& comm, DType dtype) {
  const int P = comm.size(), R = comm.rank();
  const int64_t n = 5;
  // all_gather_into, out of place and in place.
  {
    Tensor out = Tensor::full({P, n}, -99, dtype, g_device);
    comm.all_gather_into(out, filled(R, n, dtype));
    std::vector<double> want;
    for (int r = 0; r < P; ++r)
      for (int64_t i = 0; i < n; ++i) want.push_back(filled(r, 1, dtype, i).to_vector<double>()[0]);
    expect_values("all_gather_into", out, want);
    Tensor buf = Tensor::full({P * n}, -99, dtype, g_device);
    buf.narrow(0, R * n, n).copy_(filled(R, n, dtype));
    comm.all_gather_in_place(buf);
    expect_values("all_gather_in_place", buf, want);
  }
  // reduce_scatter: chunk R of the sum, in rank order.
  {
    Tensor in = filled(R, P * n, dtype);
    std::vector<double> want;
    for (int64_t i = 0; i < n; ++i) want.push_back(rank_order_sum(P, R * n + i, dtype));
    Tensor out = Tensor::full({n}, -99, dtype, g_device);
    comm.reduce_scatter(out, in);
    expect_values("reduce_scatter", out, want);
    Tensor before = in.clone();
    comm.reduce_scatter_in_place(in);
    expect_values("reduce_scatter_in_place", in.narrow(0, R * n, n), want);
    for (int r = 0; r < P; ++r)
      if (r != R)
        CHECK(bitwise_equal(in.narrow(0, r * n, n), before.narrow(0, r * n, n)),
              "reduce_scatter_in_place changed chunk " << r << " of rank " << R);
  }
  // all_reduce: an element count that does not divide over P, 2-D, same bits on every rank.
  {
    const int64_t rows = 3, cols = 4 * P + 1;
    Tensor t = filled(R, rows * cols, dtype).view({rows, cols});
    comm.all_reduce(t);
    std::vector<double> want;
    for (int64_t i = 0; i < rows * cols; ++i) want.push_back(rank_order_sum(P, i, dtype));
    expect_values("all_reduce", t, want);
    Tensor all = Tensor::empty({P, rows, cols}, dtype, g_device);
    comm.all_gather_into(all, t);
    for (int r = 0; r < P; ++r)
      CHECK(bitwise_equal(all.select(0, r), t), "all_reduce bits of rank " << r << " differ");
    Tensor one = filled(R, 1, dtype);  // fewer elements than ranks
    comm.all_reduce(one);
    expect_values("all_reduce of one element", one, {rank_order_sum(P, 0, dtype)});
  }
  // reduce and reduce_async to every root: the rank-order sum there, the others untouched.
  for (int root = 0; root < P; ++root)
    for (bool async : {false, true}) {
      Tensor t = filled(R, 2 * P + 1, dtype);
      const Tensor before = t.clone();
      if (async)
        comm.reduce_async(t, root)->wait();
      else
        comm.reduce(t, root);
      if (R == root) {
        std::vector<double> want;
        for (int64_t i = 0; i < 2 * P + 1; ++i) want.push_back(rank_order_sum(P, i, dtype));
        expect_values(async ? "reduce_async" : "reduce", t, want);
      } else {
        CHECK(bitwise_equal(t, before), "reduce changed a non-root tensor on rank " << R);
      }
    }
  // broadcast from every root.
  for (int root = 0; root < P; ++root) {
    Tensor t = filled(R, n, dtype);
    comm.broadcast(t, root);
    expect_values("broadcast", t, filled(root, n, dtype).to_vector<double>());
  }
  comm.barrier();
}

// Context parallelism: all_to_all. Values
// are small integers (exact in bf16) that encode where each element came from.
Tensor from_values(const std::vector<double>& v, DType dtype, const Shape& shape) {
  return Tensor::from_vector<double>(v, shape).to(g_device, dtype);
}

void test_context_parallel(Communicator& comm, DType dtype) {
  const int P = comm.size(), R = comm.rank();
  // all_to_all: chunk p of rank r's in holds (r, p, i); chunk p of out must hold (p, R, i).
  // n is odd and in is (P, n) while out is flat: only the element order counts.
  {
    const int64_t n = 3;
    auto code = [&](int src, int chunk, int64_t i) {
      return double((src * P + chunk) * n + i) - 20;
    };
    std::vector<double> in_v, want;
    for (int p = 0; p < P; ++p)
      for (int64_t i = 0; i < n; ++i) {
        in_v.push_back(code(R, p, i));
        want.push_back(code(p, R, i));
      }
    Tensor in = from_values(in_v, dtype, {P, n});
    Tensor out = Tensor::full({P * n}, -99, dtype, g_device);
    comm.all_to_all(out, in);
    expect_values("all_to_all", out, want);
    expect_values("all_to_all left in alone", in, in_v);
    // Stream-ordered: no host wait on NCCL; a copy issued after it sees its result.
    Tensor ordered = Tensor::full({P * n}, -99, dtype, g_device);
    comm.all_to_all_ordered(ordered, in);
    expect_values("all_to_all_ordered", ordered.clone(), want);
  }
}

void test_order_matters(Communicator& comm) {
  // With 3+ ranks the float sum depends on the order; it must be rank order on every rank.
  const int P = comm.size(), R = comm.rank();
  const float mine = R == 0 ? 1e8f : (R == 1 ? 1.0f : (R == 2 ? -1e8f : float(R)));
  Tensor t = Tensor::from_vector<float>({mine, mine});
  comm.all_reduce(t);
  float want = 1e8f;
  for (int r = 1; r < P; ++r) want += r == 1 ? 1.0f : (r == 2 ? -1e8f : float(r));
  CHECK(t.to_vector<float>()[0] == want && t.to_vector<float>()[1] == want,
        "order-sensitive all_reduce gave " << t.to_vector<float>()[0] << ", want " << want);
}

void test_errors(Communicator& comm) {
  const int P = comm.size();
  bool threw = false;
  try {
    comm.reduce_scatter(Tensor::zeros({3}, DType::f32, g_device),
                        Tensor::zeros({3 * P + 1}, DType::f32, g_device));
  } catch (const Error& e) {
    threw = std::string(e.what()).find("[reduce_scatter]") != std::string::npos;
  }
  CHECK(threw, "reduce_scatter with mismatched sizes did not throw");
  threw = false;
  try {
    comm.broadcast(Tensor::zeros({2}, DType::f32, g_device), P);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("root " + std::to_string(P)) != std::string::npos;
  }
  CHECK(threw, "broadcast from a root out of range did not throw");
  // Context-parallel exchanges: bad arguments fail on every rank before any communication.
  threw = false;
  try {
    comm.all_to_all(Tensor::zeros({P + 1}, DType::f32, g_device),
                    Tensor::zeros({P + 1}, DType::f32, g_device));
  } catch (const Error& e) {
    threw = std::string(e.what()).find("[all_to_all]") != std::string::npos;
  }
  CHECK(threw || P == 1,
        "all_to_all of " << P + 1 << " elements on " << P << " ranks did not throw");
}

void test_timeout(const World& world, Communicator& world_comm) {
  // Rank 0 enters a barrier nobody else enters yet: it must time out, not hang.
  auto lonely = MpiCommunicator::duplicate(MPI_COMM_WORLD, CommOptions{0.3});
  const auto t0 = std::chrono::steady_clock::now();
  if (world.rank() == 0) {
    std::string message;
    try {
      lonely->barrier();
    } catch (const Error& e) {
      message = e.what();
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(message.find("collective barrier timed out after 0.3 s on rank 0") != std::string::npos,
          "timeout message was '" << message << "'");
    CHECK(waited >= 0.3 && waited < 5.0, "timed out after " << waited << " s");
    bool refused = false;
    try {
      lonely->barrier();
    } catch (const Error& e) {
      refused = std::string(e.what()).find("unusable") != std::string::npos;
    }
    CHECK(refused, "a timed-out communicator was used again");
  }
  world_comm.barrier();
  // The others now complete rank 0's abandoned barrier, so no request is left dangling.
  if (world.rank() != 0) lonely->barrier();
  world_comm.barrier();
}

void test_groups(const World& world) {
  const int P = world.size(), R = world.rank();
  for (int sdp = 1; sdp <= P; ++sdp) {
    if (P % sdp) continue;
    const GroupLayout layout{P / sdp, sdp};
    ProcessGroups groups(world, layout, g_device);
    const RankCoords c = groups.coords();
    CHECK(groups.data().size() == P && groups.data().rank() == R, "data group");
    CHECK(groups.sdp().size() == sdp && groups.sdp().rank() == c.sdp_rank, "sdp group");
    CHECK(groups.batch_data().size() == P / sdp && groups.batch_data().rank() == c.batch_rank,
          "batch-data group");
    // Members, seen through the communicators themselves.
    auto members = [&](Communicator& comm) {
      Tensor all = Tensor::empty({comm.size()}, DType::i32, g_device);
      comm.all_gather_into(all, Tensor::from_vector<int32_t>({R}).to(g_device));
      std::vector<int> got;
      for (int32_t v : all.to_vector<int32_t>()) got.push_back(v);
      return got;
    };
    CHECK(members(groups.sdp()) == sdp_group_ranks(R, layout), "sdp members (sdp " << sdp << ")");
    CHECK(members(groups.batch_data()) == batch_group_ranks(R, layout),
          "batch-data members (sdp " << sdp << ")");

    // SDP K/V exchange on a span that is a view into a larger buffer (offset, not sequence 0).
    const int64_t rows = 3, H = 2, D = 4, L = rows * sdp;
    Tensor buffer =
        Tensor::full({2, L + 6, 2, H, D}, -5.0, DType::f32, g_device);  // (B, S, 2, H_kv, D)
    Tensor span = buffer.select(0, 1).narrow(0, 2, L);                  // (L, 2, H_kv, D)
    const int64_t chunk = rows * 2 * H * D;
    span.narrow(0, c.sdp_rank * rows, rows)
        .copy_(filled(R, chunk, DType::f32).view({rows, 2, H, D}));
    CommKvExchange exchange(groups.sdp());
    exchange.all_gather(span);
    const std::vector<int> peers = sdp_group_ranks(R, layout);
    for (int s = 0; s < sdp; ++s)
      expect_values("kv all_gather", span.narrow(0, s * rows, rows),
                    filled(peers[s], chunk, DType::f32).to_vector<double>());
    Tensor grad = buffer.select(0, 0).narrow(0, 4, L);
    grad.copy_(filled(R, L * 2 * H * D, DType::f32).view({L, 2, H, D}));
    exchange.reduce_scatter(grad);
    std::vector<double> want(chunk, 0.0);
    for (int64_t i = 0; i < chunk; ++i) {
      float acc = float(value(peers[0], c.sdp_rank * chunk + i, DType::f32));
      for (int s = 1; s < sdp; ++s)
        acc += float(value(peers[s], c.sdp_rank * chunk + i, DType::f32));
      want[i] = acc;
    }
    expect_values("kv reduce_scatter", grad.narrow(0, c.sdp_rank * rows, rows), want);
    CHECK(buffer.select(0, 1).narrow(0, 0, 2).to_vector<float>() ==
              std::vector<float>(2 * 2 * H * D, -5.0f),
          "all_gather wrote outside the span");

    // Only the chunks' tails (ModelInput::exchange_rows = 2 of 3 rows): the last 2 rows of
    // every chunk move; the first row of another rank's chunk is left as it was, and in the
    // reduce-scatter this rank's first row keeps its own value.
    if (sdp > 1) {
      const int64_t tail = 2, row = 2 * H * D;
      span.fill_(-7.0);
      span.narrow(0, c.sdp_rank * rows, rows)
          .copy_(filled(R, chunk, DType::f32).view({rows, 2, H, D}));
      exchange.all_gather(span, tail);
      for (int s = 0; s < sdp; ++s) {
        std::vector<double> want_s = filled(peers[s], chunk, DType::f32).to_vector<double>();
        if (s != c.sdp_rank)
          for (int64_t i = 0; i < (rows - tail) * row; ++i) want_s[size_t(i)] = -7.0;
        expect_values("kv all_gather of tails", span.narrow(0, s * rows, rows), want_s);
      }
      grad.copy_(filled(R, L * row, DType::f32).view({L, 2, H, D}));
      exchange.reduce_scatter(grad, tail);
      std::vector<double> want_t(chunk, 0.0);
      for (int64_t i = 0; i < chunk; ++i) {
        if (i < (rows - tail) * row) {
          want_t[i] = double(float(value(R, c.sdp_rank * chunk + i, DType::f32)));
          continue;
        }
        float acc = float(value(peers[0], c.sdp_rank * chunk + i, DType::f32));
        for (int s = 1; s < sdp; ++s)
          acc += float(value(peers[s], c.sdp_rank * chunk + i, DType::f32));
        want_t[i] = acc;
      }
      expect_values("kv reduce_scatter of tails", grad.narrow(0, c.sdp_rank * rows, rows), want_t);
      exchange.all_gather(span, 0);  // nothing to move: a no-op on every rank

      // A span whose rows do not divide over the sdp ranks: refused on every rank before any
      // communication (so no rank waits for a peer), naming the rows and the ranks.
      Tensor odd = buffer.select(0, 1).narrow(0, 0, L + 1);
      const std::string want_odd = "span of " + std::to_string(L + 1) +
                                   " rows does not divide over " + std::to_string(sdp) +
                                   " sdp ranks";
      auto refuses = [&](const char* op, auto&& call) {
        std::string got = "no error";
        try {
          call();
        } catch (const Error& e) {
          got = e.what();
        }
        CHECK(got.find(std::string("[") + op + "]") != std::string::npos &&
                  got.find(want_odd) != std::string::npos,
              op << " of " << L + 1 << " rows on " << sdp << " sdp ranks: " << got);
      };
      refuses("kv_exchange.all_gather", [&] { exchange.all_gather(odd); });
      refuses("kv_exchange.all_gather", [&] { exchange.all_gather(odd, 1); });
      refuses("kv_exchange.reduce_scatter", [&] { exchange.reduce_scatter(odd); });
      refuses("kv_exchange.reduce_scatter", [&] { exchange.reduce_scatter(odd, 1); });
    }
  }
  // A layout that does not match the world fails on every rank before any communication.
  bool threw = false;
  try {
    ProcessGroups bad(world, GroupLayout{P + 1, 1});
  } catch (const Error& e) {
    const std::string m = e.what();
    threw = m.find("world size " + std::to_string(P)) != std::string::npos &&
            m.find("data_parallel " + std::to_string(P + 1)) != std::string::npos &&
            m.find("sequence_data_parallel 1") != std::string::npos;
  }
  CHECK(threw, "layout " << P + 1 << " x 1 on " << P << " ranks was accepted");
}

void run_checks(const World& world) {
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(world.uses_mpi(), "not launched under mpirun?");
  CHECK(world.local_rank() >= 0 && world.local_rank() < world.local_size(), "local rank");
  auto comm = world.communicator(g_device);
  const std::string want_backend = g_device == Device::cuda ? "nccl" : "mpi";
  CHECK(comm->backend() == want_backend, "backend " << comm->backend());
  CHECK(comm->size() == world.size() && comm->rank() == world.rank(), "world communicator");
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64}) {
    // NCCL's float sums follow its own order: exact only for 2 ranks (a + b = b + a).
    if (g_device == Device::cuda && is_floating(dtype) && world.size() > 2) continue;
    test_collectives(*comm, dtype);
  }
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::i32})
    test_context_parallel(*comm, dtype);
  if (g_device == Device::cpu) test_order_matters(*comm);
  test_errors(*comm);
  test_groups(world);
  if (g_device == Device::cpu) test_timeout(world, *comm);
  comm->barrier();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rank %d of %d (%s): %d checks passed in %.2f s\n", world.rank(), world.size(),
              comm->backend(), g_checks, s);
}

// --fault throw: rank 1 throws while the others wait in a collective with a long timeout;
// the job must end (MPI_Abort) with rank 1's message, well before that timeout.
// --fault hang: rank 1 stops communicating; the others' collective times out after 1 s.
// --fault hang_ordered: the same for stream-ordered collectives (the SDP K/V exchange): the
// first returns at once on NCCL, the second must report that the first timed out.
void run_fault(const World& world, const std::string& mode) {
  DL_CHECK(world.size() >= 2, "mpi_driver", "fault modes need at least 2 ranks");
  auto comm = world.communicator(g_device);
  comm->barrier();
  if (mode == "throw") {
    comm->set_timeout_s(120);
    if (world.rank() == 1) DL_FAIL("planted", "fault thrown on rank 1 on purpose");
    comm->barrier();
  } else if (mode == "hang") {
    comm->set_timeout_s(1);
    if (world.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(120));
    Tensor t = Tensor::ones({4}, DType::f32, g_device);
    comm->all_reduce(t);
  } else if (mode == "hang_ordered") {
    comm->set_timeout_s(1);
    // One all-gather together first: NCCL connects peers lazily inside the first collective,
    // on the host and without our deadline, so a peer gone before it would hang there.
    Tensor buffer = Tensor::ones({4 * world.size()}, DType::f32, g_device);
    comm->all_gather_in_place_ordered(buffer);
    comm->barrier();
    if (world.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(120));
    comm->all_gather_in_place_ordered(buffer);
    comm->all_gather_in_place_ordered(buffer);
  } else {
    DL_FAIL("mpi_driver", "unknown fault mode '" << mode << "' (throw | hang)");
  }
  DL_FAIL("mpi_driver", "fault mode '" << mode << "' did not fail");
}

}  // namespace

// test_parallel_mpi [--device cuda] [--fault throw|hang|hang_ordered]
int main(int argc, char** argv) {
  World world;
  std::string device, fault;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    (flag == "--device" ? device : flag == "--fault" ? fault : device) = argv[i + 1];
  }
  if (device == "cuda") {
    g_device = Device::cuda;
    // DRIFTLESS_GPU_REQUIRED=1 (tests/gpu/run.sh): a GPU that cannot be opened fails, not skips.
    if (cuda::device_count() == 0 && env_value("DRIFTLESS_GPU_REQUIRED") == "1") {
      std::printf("rank %d: DRIFTLESS_GPU_REQUIRED=1 but no CUDA device can be opened\n",
                  world.rank());
      return 1;
    }
    if (cuda::device_count() < world.local_size()) {
      std::printf("rank %d: skipped, %d GPUs for %d local ranks\n", world.rank(),
                  cuda::device_count(), world.local_size());
      return 77;  // CTest SKIP_RETURN_CODE
    }
  }
  return run_guarded(world, [&] {
    if (!fault.empty())
      run_fault(world, fault);
    else
      run_checks(world);
  });
}
