// Catch2 main for tests that run under mpiexec: MPI is initialised around the session, only rank 0
// prints the report, and the exit code is the worst over all ranks so any rank's failure fails ctest.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Catch::Session session;
  if (int rc = session.applyCommandLine(argc, argv); rc != 0) {
    MPI_Finalize();
    return rc;
  }
  if (rank != 0) {
    // keep other ranks quiet unless they fail: their report goes to stderr only on failure
    session.configData().outputFilename = "/dev/stderr";  // Catch2 v2 knows no "%stderr"
    session.configData().showSuccessfulTests = false;
  }
  int failed = session.run();
  int worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst == 0 ? 0 : 1;
}
