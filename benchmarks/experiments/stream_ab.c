/* Experiment: what costs STREAM bandwidth besides the kernel. Runs
 * nodemap's own triad (or copy) kernel on T pinned threads (CPUs 0..T-1)
 * in several variants, rotating through them round after round in one
 * process so that machine noise hits every variant alike; prints each
 * variant's median GB/s and its median ratio to the first variant in the
 * same round. Variants differ in
 *   - how far apart the three arrays lie in one THP mapping (their length
 *     plus "extra" bytes; 0 is what adjacent mappings gave before);
 *   - whether threads meet at a barrier after every repetition (STREAM's
 *     timing, each rep waits for the slowest thread) or run all repetitions
 *     back to back (likwid-bench's: one time over all of them);
 *   - nothing but the timing ("same arrays" rows);
 *   - when they were allocated (the "again" rows repeat a layout, allocated
 *     last: a difference there is the allocator's, not the layout's).
 * This is what set NM_STAGGER in native/stream.c.
 *
 *   gcc -O3 -pthread -Inative benchmarks/experiments/stream_ab.c native/stream_isa.c -o /tmp/stream_ab
 *   /tmp/stream_ab THREADS MIB_PER_ARRAY ROUNDS [copy]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "nodemap_native.h"
#include "stream_isa.h"

#define REPS 5
#define MiB (1UL << 20)
static const struct {
    const char *name;
    size_t extra; /* bytes between one array's end and the next one's start */
    int barrier;  /* 1: barrier after every rep */
    int same;     /* >= 0: the arrays of that row (only the timing differs) */
} VARIANTS[] = {
    {"adjacent, barrier/rep", 0, 1, -1},
    {"+1KiB, barrier/rep", 1024, 1, -1},
    {"+5KiB, barrier/rep", 5 * 1024, 1, -1},
    {"+2MiB+5KiB, barrier/rep (now)", 2 * MiB + 5 * 1024, 1, -1},
    {"  same arrays, one run", 0, 0, 3},
    {"adjacent, one run", 0, 0, -1},
    {"adjacent, barrier/rep, again", 0, 1, -1},
    {"+2MiB+5KiB, barrier/rep, again", 2 * MiB + 5 * 1024, 1, -1},
};
#define NL (int)(sizeof VARIANTS / sizeof VARIANTS[0])
static long n;
static int nthreads, kernel = NM_K_TRIAD;
static double *arr[16][3];
static const isa_t *isa;
static pthread_barrier_t all, workers;
static int cur;
static double took;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void *worker(void *p) {
    long id = (long)p, lo = n / nthreads * id, hi = id == nthreads - 1 ? n : lo + n / nthreads;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(id, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    for (int l = 0; l < NL; l++)
        for (int x = 0; x < 3; x++)
            for (long j = lo; j < hi; j++) arr[l][x][j] = 1.0 + x;
    for (;;) {
        pthread_barrier_wait(&all);
        double **a = arr[cur], t0 = 0;
        stream_isa_kernel(isa, kernel, a[0], a[1], a[2], lo, hi, 0); /* warm-up */
        pthread_barrier_wait(&workers);
        t0 = now();
        for (int r = 0; r < REPS; r++) {
            stream_isa_kernel(isa, kernel, a[0], a[1], a[2], lo, hi, 0);
            if (VARIANTS[cur].barrier) pthread_barrier_wait(&workers);
        }
        pthread_barrier_wait(&workers);
        if (id == 0) took = now() - t0;
        pthread_barrier_wait(&all);
    }
    return NULL;
}

static int cmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s THREADS MIB_PER_ARRAY ROUNDS [copy]\n", argv[0]);
        return 2;
    }
    nthreads = atoi(argv[1]);
    n = atol(argv[2]) * MiB / sizeof(double);
    int rounds = atoi(argv[3]);
    if (argc > 4 && strcmp(argv[4], "copy") == 0) kernel = NM_K_COPY;
    if (rounds > 256 || rounds < 1 || nthreads < 1) return 2;
    isa = stream_isa_resolve();
    size_t len = n * sizeof(double);
    for (int l = 0; l < NL; l++) {
        if (VARIANTS[l].same >= 0) {
            memcpy(arr[l], arr[VARIANTS[l].same], sizeof arr[l]);
            continue;
        }
        size_t sep = len + VARIANTS[l].extra;
        char *p = mmap(NULL, 3 * sep + 2 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return perror("mmap"), 1;
        p = (char *)(((unsigned long)p + 2 * MiB - 1) & ~(2 * MiB - 1));
        madvise(p, 3 * sep, MADV_HUGEPAGE);
        for (int x = 0; x < 3; x++) arr[l][x] = (double *)(p + x * sep);
    }
    pthread_barrier_init(&all, NULL, nthreads + 1);
    pthread_barrier_init(&workers, NULL, nthreads);
    for (long i = 0; i < nthreads; i++) {
        pthread_t t;
        pthread_create(&t, NULL, worker, (void *)i);
    }
    double gbs[NL][256], ratio[NL][256], bytes = (kernel == NM_K_TRIAD ? 24.0 : 16.0) * n * REPS;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < NL; i++) {
            cur = (i + r) % NL; /* rotate the order: no layout always runs first */
            pthread_barrier_wait(&all);
            pthread_barrier_wait(&all);
            gbs[cur][r] = bytes / took / 1e9;
        }
    printf("%s, %d threads, %ld MiB per array, %s kernels, %d rounds of %d reps\n", kernel == NM_K_TRIAD ? "triad" : "copy",
           nthreads, (long)(len / MiB), isa->name, rounds, REPS);
    for (int l = 0; l < NL; l++) {
        for (int r = 0; r < rounds; r++) ratio[l][r] = gbs[l][r] / gbs[0][r];
        qsort(gbs[l], rounds, sizeof(double), cmp);
        qsort(ratio[l], rounds, sizeof(double), cmp);
        printf("%-32s median %7.2f GB/s  best %7.2f  ratio to first %.3f (quartiles %.3f-%.3f)\n", VARIANTS[l].name,
               gbs[l][rounds / 2], gbs[l][rounds - 1], ratio[l][rounds / 2], ratio[l][rounds / 4], ratio[l][3 * rounds / 4]);
    }
    return 0;
}
