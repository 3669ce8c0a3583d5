/* Smallest proof that srun --mpi=pmix wired the ranks together: every rank joins one allreduce and
 * rank 0 checks the sum of ranks. Exit 0 only when the world has the expected size and sum. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long mine = rank, sum = -1;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  int expected_size = argc > 1 ? atoi(argv[1]) : size;
  int ok = size == expected_size && sum == (long)size * (size - 1) / 2;
  printf("mpi_hello: rank %d of %d, sum of ranks %ld%s\n", rank, size, sum, ok ? "" : " (WRONG)");
  fflush(stdout);
  MPI_Finalize();
  return ok ? 0 : 1;
}
