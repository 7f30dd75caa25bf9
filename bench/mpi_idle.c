/*
 * mpi_idle: an MPI_Recv that waits ~300 ms for its message, four times after a first exchange
 * has connected the ranks, so that a profiler sees the receiver's idle polling loop (BENCHMARKS.md,
 * "Small messages over TCP faster than MPICH": instructions per idle poll of Open MPI over the
 * provider). Under callgrind, rank 0 only:
 *
 *   mpicc.openmpi -O2 -o /tmp/mpi_idle bench/mpi_idle.c
 *   X="-x HX_TRANSPORTS=tcp -x FI_PROVIDER_PATH=$PWD/target/release"
 *   mpirun.openmpi --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm \
 *     -np 1 $X valgrind --tool=callgrind --collect-atstart=no --toggle-collect=PMPI_Recv \
 *     /tmp/mpi_idle : -np 1 $X /tmp/mpi_idle
 *
 * then instructions / calls of opal_progress (one poll of the loop) in callgrind_annotate
 * --inclusive=yes --tree=caller. (-x must be repeated in each application context.)
 */
#include <mpi.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char b[8] = {0};
    for (int i = 0; i < 4; i++) {
        if (rank == 0) {
            MPI_Recv(b, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(b, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
        } else {
            if (i > 0)
                usleep(300000);
            MPI_Send(b, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
            MPI_Recv(b, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
    }
    MPI_Finalize();
    return 0;
}
