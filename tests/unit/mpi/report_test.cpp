#include "mpi/report.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace outboard::mpi {
namespace {

TEST(MpiReportTest, OneLinePerCalledOperationWithItsReasons) {
  Tally tally;
  for (int i = 0; i < 10; ++i) tally.add(Op::kIalltoall, Route::kNoAgent);
  tally.add(Op::kIalltoall, Route::kIntercomm);
  tally.add(Op::kIallreduce, Route::kOffloaded);
  tally.add(Op::kIallreduce, Route::kReduceOp);
  tally.add(Op::kIallreduce, Route::kReduceType);
  EXPECT_EQ(render_report(tally.snapshot(), 4, "MPICH Version: 4.0.2"),
            "outboard-mpi report: 4 ranks on MPICH Version: 4.0.2\n"
            "  MPI_Ialltoall          0 offloaded       11 passed through (intercommunicator: 1, no agent: 10)\n"
            "  MPI_Iallreduce         1 offloaded        2 passed through (datatype not int, long, float or double (C or Fortran): 1, "
            "op not sum, min, max or prod: 1)\n");
}

TEST(MpiReportTest, PointToPointRowsFollowTheCollectivesWithTheirReasons) {
  Tally tally;
  tally.add(Op::kIsend, Route::kOffloaded);
  tally.add(Op::kRecv, Route::kProcNull);
  tally.add(Op::kSendrecv, Route::kIntercomm);
  EXPECT_EQ(render_report(tally.snapshot(), 2, "Open MPI v4.1.4"),
            "outboard-mpi report: 2 ranks on Open MPI v4.1.4\n"
            "  MPI_Isend              1 offloaded        0 passed through\n"
            "  MPI_Recv               0 offloaded        1 passed through (MPI_PROC_NULL: 1)\n"
            "  MPI_Sendrecv           0 offloaded        1 passed through (intercommunicator: 1)\n");
}

TEST(MpiReportTest, SaysWhenNothingWasIntercepted) {
  EXPECT_EQ(render_report(Counts{}, 1, "Open MPI v4.1.4"),
            "outboard-mpi report: 1 rank on Open MPI v4.1.4\n  no operation it intercepts was called\n");
}

TEST(MpiReportTest, CountsFromManyThreadsAddUp) {
  Tally tally;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) tally.add(Op::kIbcast, Route::kNonContiguous);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(tally.snapshot()[static_cast<size_t>(Op::kIbcast)][static_cast<size_t>(Route::kNonContiguous)], 4000u);
}

}  // namespace
}  // namespace outboard::mpi
