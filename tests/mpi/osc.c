/* MPI one-sided communication through Open MPI's osc/rdma over btl/ofi in its RDMA mode, i.e.
 * hxcomm's fi_write, fi_read and atomics (issue 8): every rank puts a block into its right
 * neighbour's window and gets it back (512 KiB, and small ones of 8 B to 32 KiB, which hxcomm
 * carries in one frame each way), adds into every rank's counter with MPI_Accumulate and
 * MPI_Fetch_and_op, and all race one MPI_Compare_and_swap on rank 0, exactly one winning.
 * Prints "OK osc ..." or "FAIL osc ..." on rank 0 and exits non-zero on failure.
 *
 *   mpirun --mca pml ob1 --mca btl self,vader,ofi --mca btl_ofi_mode 2 \
 *       --mca btl_ofi_provider_include hxcomm --mca osc rdma ./osc
 *
 * (Open MPI 4.1.4's osc/rdma crashes in btl/ofi's compare-and-swap when ranks of one host reach
 * each other through btl/ofi rather than vader, `--mca btl self,ofi` on one host: a NULL
 * registration handle in its own code; with vader beside it, as above, it does not.)
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define N (1 << 16)
/* Small blocks, in words: up to the eager limit (32 KiB), and one word past it. */
static const int SMALL[] = {1, 7, 100, 4096, 4097};
#define NSMALL (int)(sizeof SMALL / sizeof SMALL[0])
#define SMALL_WORDS (1 + 7 + 100 + 4096 + 4097)
static uint64_t small_word(int rank, int k, int i) { return ((uint64_t)rank << 48) | ((uint64_t)k << 40) | (uint64_t)i; }
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    uint64_t *base;
    MPI_Win win;
    MPI_Win_allocate((N + 8 + SMALL_WORDS) * sizeof(uint64_t), sizeof(uint64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    for (int i = 0; i < N + 8 + SMALL_WORDS; i++) base[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t *src = malloc(N * sizeof(uint64_t));
    for (int i = 0; i < N; i++) src[i] = ((uint64_t)rank << 32) | i;
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    /* Put a block to the right neighbour, accumulate 1 into everyone's counter. */
    MPI_Win_lock_all(0, win);
    MPI_Put(src, N, MPI_UINT64_T, right, 0, N, MPI_UINT64_T, win);
    uint64_t one = 1, old = 0;
    for (int t = 0; t < size; t++) {
        MPI_Accumulate(&one, 1, MPI_UINT64_T, t, N, 1, MPI_UINT64_T, MPI_SUM, win);
        MPI_Fetch_and_op(&one, &old, MPI_UINT64_T, t, N + 1, MPI_SUM, win);
        MPI_Win_flush(t, win);
    }
    /* Small puts, each flushed on its own. */
    uint64_t *small = malloc(SMALL_WORDS * sizeof(uint64_t));
    for (int k = 0, off = 0; k < NSMALL; off += SMALL[k], k++) {
        for (int i = 0; i < SMALL[k]; i++) small[off + i] = small_word(rank, k, i);
        MPI_Put(small + off, SMALL[k], MPI_UINT64_T, right, N + 8 + off, SMALL[k], MPI_UINT64_T, win);
        MPI_Win_flush(right, win);
    }
    MPI_Win_flush_all(win);
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    int bad = 0;
    for (int k = 0, off = 0; k < NSMALL; off += SMALL[k], k++)
        for (int i = 0; i < SMALL[k]; i++)
            if (base[N + 8 + off + i] != small_word(left, k, i)) { bad++; break; }
    /* Small gets of what this rank put on its right, each flushed on its own. */
    MPI_Win_lock_all(0, win);
    uint64_t *small_back = calloc(SMALL_WORDS, sizeof(uint64_t));
    for (int k = 0, off = 0; k < NSMALL; off += SMALL[k], k++) {
        MPI_Get(small_back + off, SMALL[k], MPI_UINT64_T, right, N + 8 + off, SMALL[k], MPI_UINT64_T, win);
        MPI_Win_flush(right, win);
    }
    MPI_Win_unlock_all(win);
    if (memcmp(small_back, small, SMALL_WORDS * sizeof(uint64_t))) bad++;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < N; i++)
        if (base[i] != (((uint64_t)left << 32) | i)) bad++;
    if (base[N] != (uint64_t)size || base[N + 1] != (uint64_t)size) bad++;
    /* Compare-and-swap: every rank tries to claim rank 0's slot; exactly one wins. */
    MPI_Win_lock_all(0, win);
    uint64_t mine = rank + 1, cmp = 0, got = 99;
    MPI_Compare_and_swap(&mine, &cmp, &got, MPI_UINT64_T, 0, N + 2, win);
    MPI_Win_flush(0, win);
    /* Get the left neighbour's block back. */
    uint64_t *back = malloc(N * sizeof(uint64_t));
    MPI_Get(back, N, MPI_UINT64_T, right, 0, N, MPI_UINT64_T, win);
    MPI_Win_flush(right, win);
    MPI_Win_unlock_all(win);
    for (int i = 0; i < N; i++)
        if (back[i] != src[i]) { bad++; break; }
    int won = got == 0, winners = 0;
    MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (winners != 1) bad++;
    int allbad = 0;
    MPI_Allreduce(&bad, &allbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s osc ranks=%d put/get %d words and %d small blocks (1-4097 words), accumulate, fetch_and_op, compare_and_swap\n", allbad ? "FAIL" : "OK", size, N, NSMALL);
    MPI_Win_free(&win);
    MPI_Finalize();
    return allbad != 0;
}
