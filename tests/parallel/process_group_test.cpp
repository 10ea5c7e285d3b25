// Group arithmetic (data / sdp / batch-data membership), layout validation, and a World
// made without a launcher (one rank, no MPI) with its ProcessGroups and run_guarded.
#include "parallel/process_group.h"

#include <gtest/gtest.h>

#include "parallel/kv_exchange.h"

namespace driftless::parallel {
namespace {

TEST(ParallelGroups, ValidateNamesAllThreeNumbers) {
  EXPECT_NO_THROW(validate_layout(6, GroupLayout{3, 2}));
  EXPECT_NO_THROW(validate_layout(1, GroupLayout{1, 1}));
  try {
    validate_layout(6, GroupLayout{2, 4});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("world size 6"), std::string::npos) << m;
    EXPECT_NE(m.find("data_parallel 2"), std::string::npos) << m;
    EXPECT_NE(m.find("sequence_data_parallel 4"), std::string::npos) << m;
  }
  EXPECT_THROW(validate_layout(0, GroupLayout{0, 1}), Error);
  EXPECT_THROW(validate_layout(-2, GroupLayout{2, -1}), Error);
}

TEST(ParallelGroups, SdpGroupsAreConsecutiveBatchGroupsStrided) {
  const GroupLayout l{3, 2};  // ranks 0..5: sdp groups {0,1} {2,3} {4,5}
  EXPECT_EQ(sdp_group_ranks(0, l), (std::vector<int>{0, 1}));
  EXPECT_EQ(sdp_group_ranks(3, l), (std::vector<int>{2, 3}));
  EXPECT_EQ(sdp_group_ranks(5, l), (std::vector<int>{4, 5}));
  EXPECT_EQ(batch_group_ranks(0, l), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(batch_group_ranks(3, l), (std::vector<int>{1, 3, 5}));
  const RankCoords c = rank_coords(5, l);
  EXPECT_EQ(c.sdp_rank, 1);
  EXPECT_EQ(c.batch_rank, 2);
  EXPECT_THROW(rank_coords(6, l), Error);
}

TEST(ParallelGroups, EveryRankInExactlyOneGroupOfEachKind) {
  for (const GroupLayout l : {GroupLayout{1, 1}, GroupLayout{1, 4}, GroupLayout{4, 1},
                              GroupLayout{2, 3}, GroupLayout{3, 4}}) {
    const int n = l.world_size();
    std::vector<int> sdp_seen(n, 0), batch_seen(n, 0);
    for (int r = 0; r < n; ++r) {
      const RankCoords c = rank_coords(r, l);
      const auto s = sdp_group_ranks(r, l), b = batch_group_ranks(r, l);
      ASSERT_EQ(int(s.size()), l.sequence_data_parallel);
      ASSERT_EQ(int(b.size()), l.data_parallel);
      EXPECT_EQ(s[c.sdp_rank], r);    // its position in the sdp group
      EXPECT_EQ(b[c.batch_rank], r);  // its position in the batch-data group
      if (c.sdp_rank == 0)
        for (int m : s) ++sdp_seen[m];
      if (c.batch_rank == 0)
        for (int m : b) ++batch_seen[m];
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(sdp_seen[r], 1) << "rank " << r;
      EXPECT_EQ(batch_seen[r], 1) << "rank " << r;
    }
  }
}

TEST(ParallelWorld, WithoutLauncherIsOneRankWithoutMpi) {
  if (World::launched_by_mpi()) GTEST_SKIP() << "running under an MPI launcher";
  World world;
  EXPECT_FALSE(world.uses_mpi());
  EXPECT_EQ(world.rank(), 0);
  EXPECT_EQ(world.size(), 1);
  EXPECT_EQ(world.local_rank(), 0);
  ProcessGroups groups(world, GroupLayout{1, 1});
  EXPECT_STREQ(groups.data().backend(), "single");
  EXPECT_EQ(groups.sdp().size(), 1);
  EXPECT_EQ(groups.batch_data().size(), 1);
  CommKvExchange exchange(groups.sdp());
  EXPECT_EQ(exchange.ranks(), 1);
  Tensor span = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  exchange.all_gather(span);
  exchange.reduce_scatter(span);
  EXPECT_EQ(span.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(ParallelWorld, LayoutLargerThanWorldFailsBeforeWorkWithHint) {
  if (World::launched_by_mpi()) GTEST_SKIP() << "running under an MPI launcher";
  World world;
  try {
    ProcessGroups groups(world, GroupLayout{1, 2});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("world size 1 must equal data_parallel 1 x sequence_data_parallel 2"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("mpirun -np 2"), std::string::npos) << m;
  }
}

TEST(ParallelWorld, RunGuardedReturnsOneAndPrintsTheRank) {
  if (World::launched_by_mpi()) GTEST_SKIP() << "running under an MPI launcher";
  World world;
  EXPECT_EQ(run_guarded(world, [] {}), 0);
  testing::internal::CaptureStderr();
  const int rc = run_guarded(world, [] { DL_FAIL("test", "planted"); });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(err, "rank 0: [test] planted\n");
}

TEST(ParallelWorld, SingleProcessCudaGroupsNeedNoNccl) {
  if (World::launched_by_mpi()) GTEST_SKIP() << "running under an MPI launcher";
  World world;
  ProcessGroups groups(world, GroupLayout{1, 1}, Device::cuda);
  EXPECT_EQ(groups.sdp().device(), Device::cuda);
  EXPECT_STREQ(groups.sdp().backend(), "single");
}

// (Rows that do not divide over the sdp ranks need several ranks: test_parallel_mpi.)
TEST(ParallelKvExchange, RejectsNonContiguousSpan) {
  auto comm = make_single_process_communicator();
  CommKvExchange exchange(*comm);
  Tensor strided = Tensor::zeros({4, 2}).transpose(0, 1);
  EXPECT_THROW(exchange.all_gather(strided), Error);
}

}  // namespace
}  // namespace driftless::parallel

namespace driftless::parallel {
namespace {

// The GPU of a rank comes from its place on its host, never from its global rank: the
// launcher's local rank first (a wrapper may place ranks as if on several hosts), then
// SLURM's, then the shared-memory split.
TEST(ParallelWorld, LocalRankComesFromTheLauncherThenTheHost) {
  EXPECT_EQ(choose_local_rank(nullptr, nullptr, 3), 3);
  EXPECT_EQ(choose_local_rank("1", nullptr, 3), 1);
  EXPECT_EQ(choose_local_rank(nullptr, "2", 3), 2);
  EXPECT_EQ(choose_local_rank("0", "2", 3), 0);
  EXPECT_EQ(choose_local_rank("", "", 5), 5);
  EXPECT_THROW(choose_local_rank("x1", nullptr, 0), Error);
  EXPECT_THROW(choose_local_rank("-1", nullptr, 0), Error);
}

// The hybrid's sub-groups are checked against the ranks sharing a sequence.
TEST(ParallelGroups, HybridGroupMustDivideTheSequenceRanks) {
  EXPECT_NO_THROW(validate_layout(8, {2, 4, 2}));
  EXPECT_THROW(validate_layout(6, {1, 6, 4}), Error);
}

}  // namespace
}  // namespace driftless::parallel
