/* Idle load latency: one pinned thread chases pointers through a random
 * cyclic permutation of cache-line-sized nodes (Sattolo's algorithm, so the
 * permutation is a single cycle through every node). Each load depends on
 * the previous one, so time / loads is the latency of one load. Huge pages
 * are requested so that a DRAM-sized chase measures memory, not the TLB. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "nodemap_native.h"

/* Nodes between two looks at the stop flag while the cycle is built and
 * walked once untimed: 1M nodes (64 MiB of 64 B lines), well under a
 * second even where every step misses the caches, so Ctrl-C during the
 * set-up of a DRAM-sized chase ends the run within the harness's second. */
#define NM_POLL_NODES (1L << 20)

typedef struct {
    size_t bytes, line;
    int cpu;
    const int *mem_nodes;
    int nmem, reps;
    long min_loads;
    uint64_t seed;
    double *ns; /* out: ns per load, one per repetition */
    long *steps_to_return; /* out: steps of the verification walk */
    int err;
    int *reps_done; /* out: repetitions run before a stop (nm_stop) */
} chase_t;

static uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Whether to give up a set-up loop at step i: a stop was asked (looked
 * at every NM_POLL_NODES steps only, the flag costs an atomic load). */
static int cut(long i) {
    return i % NM_POLL_NODES == 0 && nm_stopping();
}

/* Link node i to node perm[i] with a single random cycle (Sattolo).
 * -1 when a stop (Ctrl-C) cut it short: the buffer is then no cycle. */
static int build_cycle(char *buf, long nodes, size_t line, uint64_t seed) {
    long *perm = (long *)(void *)buf; /* scratch: slot i of line i holds perm[i] */
    for (long i = 0; i < nodes; i++) {
        if (cut(i)) return -1;
        *(long *)(void *)(buf + i * line) = i;
    }
    uint64_t st = seed ? seed : 0x9E3779B97F4A7C15ULL;
    for (long i = nodes - 1; i > 0; i--) {
        if (cut(i)) return -1;
        long j = (long)(xorshift(&st) % (uint64_t)i); /* j < i: one cycle */
        long *pi = (long *)(void *)(buf + i * line), *pj = (long *)(void *)(buf + j * line);
        long t = *pi;
        *pi = *pj;
        *pj = t;
    }
    (void)perm;
    for (long i = 0; i < nodes; i++) {
        if (cut(i)) return -1;
        long *slot = (long *)(void *)(buf + i * line);
        *(void **)slot = buf + (*slot) * line;
    }
    return 0;
}

static void *chase(void *arg) {
    chase_t *c = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (c->cpu < 0 || c->cpu >= CPU_SETSIZE) {
        c->err = -1;
        return NULL;
    }
    CPU_SET(c->cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
        c->err = -1;
        return NULL;
    }
    long nodes = (long)(c->bytes / c->line);
    if (nodes < 2) {
        c->err = EINVAL;
        return NULL;
    }
    size_t len = nodes * c->line;
    char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        c->err = errno;
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    madvise(buf, len, MADV_HUGEPAGE);
#endif
    if (c->nmem > 0) {
        unsigned long mask[16] = {0};
        for (int i = 0; i < c->nmem; i++) mask[c->mem_nodes[i] / 64] |= 1UL << (c->mem_nodes[i] % 64);
        if (syscall(SYS_mbind, buf, len, c->nmem == 1 ? 2 : 3, mask, 1024UL, 0U) != 0) {
            c->err = errno;
            munmap(buf, len);
            return NULL;
        }
    }
    /* a stop during set-up: no repetition ran (*reps_done stays 0) */
    if (build_cycle(buf, nodes, c->line, c->seed) != 0) {
        munmap(buf, len);
        return NULL;
    }
    /* verification walk: back at the start after exactly `nodes` steps */
    void **p = (void **)(void *)buf;
    long steps = 0;
    do {
        if (cut(steps + 1)) {
            munmap(buf, len);
            return NULL;
        }
        p = (void **)*p;
        steps++;
    } while (p != (void **)(void *)buf && steps <= nodes);
    *c->steps_to_return = steps;
    /* each repetition walks whole cycles, so it also ends at the start */
    long cycles = (c->min_loads + nodes - 1) / nodes;
    long loads = cycles * nodes;
    for (int r = 0; r < c->reps && !c->err; r++) {
        if (nm_stopping()) break; /* Ctrl-C: keep the repetitions done */
        *c->reps_done = r + 1;
        p = (void **)(void *)buf;
        double t0 = now();
        for (long i = 0; i < cycles; i++) {
            long k = nodes;
            for (; k >= 8; k -= 8) {
                p = (void **)*p; p = (void **)*p; p = (void **)*p; p = (void **)*p;
                p = (void **)*p; p = (void **)*p; p = (void **)*p; p = (void **)*p;
            }
            for (; k > 0; k--) p = (void **)*p;
        }
        double dt = now() - t0;
        if (p != (void **)(void *)buf) c->err = -2;
        c->ns[r] = dt * 1e9 / loads;
    }
    munmap(buf, len);
    return NULL;
}

int nm_latency_run(size_t bytes, size_t line, int cpu, const int *mem_nodes, int nmem, int reps, long min_loads,
                   unsigned long long seed, double *ns, long *steps_to_return, int *reps_done) {
    if (line < sizeof(void *) || reps < 1) return EINVAL;
    *reps_done = 0;
    chase_t c = {bytes, line, cpu, mem_nodes, nmem, reps, min_loads, seed, ns, steps_to_return, 0, reps_done};
    pthread_t th;
    int err = pthread_create(&th, NULL, chase, &c);
    if (err) return err;
    pthread_join(th, NULL);
    return c.err;
}
