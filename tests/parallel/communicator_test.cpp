// Single-process Communicator (world size 1, no MPI) and the rank-order sum the MPI backend
// reduces with: identity/copy semantics, argument errors, and the fixed summation order.
#include "parallel/communicator.h"

#include <gtest/gtest.h>

#include <cstring>

namespace driftless::parallel {
namespace {

TEST(ParallelSingleProcess, ReportsOneRank) {
  auto comm = make_single_process_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_STREQ(comm->backend(), "single");
  EXPECT_EQ(comm->device(), Device::cpu);
}

TEST(ParallelSingleProcess, AllGatherCopiesOutOfPlaceAndKeepsInPlace) {
  auto comm = make_single_process_communicator();
  Tensor in = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor out = Tensor::full({6}, -7.0);
  comm->all_gather_into(out, in);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Tensor buf = in.clone();
  comm->all_gather_in_place(buf);
  EXPECT_EQ(buf.to_vector<float>(), in.to_vector<float>());
}

TEST(ParallelSingleProcess, ReduceScatterAllReduceBroadcastAreIdentity) {
  auto comm = make_single_process_communicator();
  Tensor in = Tensor::from_vector<double>({1.5, -2, 3});
  Tensor out = Tensor::zeros({3}, DType::f64);
  comm->reduce_scatter(out, in);
  EXPECT_EQ(out.to_vector<double>(), in.to_vector<double>());
  Tensor t = Tensor::from_vector<int64_t>({4, 5});
  comm->all_reduce(t);
  comm->broadcast(t, 0);
  comm->barrier();
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{4, 5}));
  Tensor buf = Tensor::from_vector<int32_t>({9, 8, 7});
  comm->reduce_scatter_in_place(buf);
  EXPECT_EQ(buf.to_vector<int32_t>(), (std::vector<int32_t>{9, 8, 7}));
}

TEST(ParallelSingleProcess, RejectsBadArguments) {
  auto comm = make_single_process_communicator();
  Tensor a = Tensor::zeros({4});
  try {
    comm->all_gather_into(Tensor::zeros({5}), a);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[all_gather_into]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(5 elements)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm->reduce_scatter(Tensor::zeros({4}, DType::f64), a), Error);  // dtype
  EXPECT_THROW(comm->broadcast(a, 1), Error);                                    // root
  Tensor strided = Tensor::zeros({4, 4}).transpose(0, 1);
  EXPECT_THROW(comm->all_reduce(strided), Error);
  EXPECT_THROW(comm->set_timeout_s(0), Error);
}

TEST(ParallelSingleProcess, AllToAllCopies) {
  auto comm = make_single_process_communicator();
  Tensor in = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor out = Tensor::full({6}, -7.0);  // only numel has to match
  comm->all_to_all(out, in);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(ParallelSingleProcess, AllToAllAndSendRecvRejectBadArguments) {
  auto comm = make_single_process_communicator();
  auto message = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto contains = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  };
  Tensor a = Tensor::zeros({4});
  std::string m = message([&] { comm->all_to_all(Tensor::zeros({5}), a); });
  EXPECT_TRUE(contains(m, "[all_to_all]") && contains(m, "(5 elements)")) << m;
  m = message([&] { comm->all_to_all(Tensor::zeros({4}, DType::bf16), a); });
  EXPECT_TRUE(contains(m, "[all_to_all] dtypes differ: out bf16 and in f32")) << m;
  Tensor buf = Tensor::zeros({6});
  m = message([&] { comm->all_to_all(buf.narrow(0, 2, 4), buf.narrow(0, 0, 4)); });
  EXPECT_TRUE(contains(m, "[all_to_all] out and in overlap")) << m;
  m = message([&] { comm->all_to_all(Tensor::zeros({4, 4}), a.view({2, 2}).transpose(0, 1)); });
  EXPECT_TRUE(contains(m, "[all_to_all]") && contains(m, "contiguous")) << m;
}

TEST(ParallelSingleProcess, TimeoutIsConfigurable) {
  auto comm = make_single_process_communicator(CommOptions{2.5});
  EXPECT_EQ(comm->timeout_s(), 2.5);
  comm->set_timeout_s(7);
  EXPECT_EQ(comm->timeout_s(), 7);
}

TEST(ParallelSumChunks, SumsInRankOrder) {
  // In rank order (1e8 + 1) + (-1e8) rounds to 0 in float; any other order gives 1.
  Tensor parts = Tensor::from_vector<float>({1e8f, 1.0f, 1.0f, 2.0f, -1e8f, 3.0f}, {3, 2});
  Tensor out = Tensor::empty({2});
  sum_chunks_in_rank_order(out, parts, 3);
  const std::vector<float> got = out.to_vector<float>();
  EXPECT_EQ(got[0], (1e8f + 1.0f) + -1e8f);
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_EQ(got[1], 6.0f);
}

TEST(ParallelSumChunks, OutMayAliasAChunkAndBf16AccumulatesInFloat) {
  Tensor parts = Tensor::from_vector<int64_t>({1, 2, 10, 20, 100, 200});
  sum_chunks_in_rank_order(parts.narrow(0, 2, 2), parts, 3);
  EXPECT_EQ(parts.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 111, 222, 100, 200}));

  // bf16 has 8 significant bits: 256 + 1 + 1 is 256 when rounded at each step, 258 when
  // accumulated in float and rounded once.
  Tensor b = Tensor::from_vector<float>({256, 1, 1}).to(DType::bf16);
  Tensor o = Tensor::empty({1}, DType::bf16);
  sum_chunks_in_rank_order(o, b, 3);
  EXPECT_EQ(o.to_vector<float>()[0], 258.0f);
}

TEST(ParallelSumChunks, RejectsMismatchedSizes) {
  EXPECT_THROW(sum_chunks_in_rank_order(Tensor::empty({3}), Tensor::empty({7}), 2), Error);
  EXPECT_THROW(sum_chunks_in_rank_order(Tensor::empty({3}, DType::f64), Tensor::empty({6}), 2),
               Error);
}

}  // namespace
}  // namespace driftless::parallel
