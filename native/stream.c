/* STREAM kernels (copy, scale, add, triad, plus a read-only sum) on an
 * explicit list of CPUs: one pthread per CPU, pinned before it first touches
 * its slice, kept alive across repetitions behind a barrier so that thread
 * creation is never timed. Thread 0 takes one CLOCK_MONOTONIC pair per
 * timed sample of a kernel, between barriers: one repetition (STREAM's
 * timing), or `batch` repetitions back to back with no barrier between
 * them (likwid-bench's: a slow thread's tail is paid once per sample, not
 * once per repetition). Every array is poisoned (NaN) first,
 * so an element a kernel failed to write fails the final check. The loops
 * themselves, one copy per instruction set, are in stream_isa.c. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "nodemap_native.h"
#include "stream_isa.h"

#define NM_ALIGN (2UL << 20) /* 2 MiB: huge pages */
/* 2 MiB + 5 KiB between arrays: a multiple of 64 B (vector and cache line
 * alignment stay), no power of two, and 1 KiB off in the low 12 bits */
#define NM_STAGGER ((2UL << 20) + 5 * 1024)
#define NM_EPS 1e-13
/* Elements between two looks at the stop flag in the long untimed loops
 * (first touch, check): 64 MiB of doubles, ~10-60 ms on one core, so a
 * Ctrl-C during the set-up of GiB arrays ends the run within the second
 * the harness promises (it took 1.9-4.7 s with 512 MiB arrays). */
#define NM_POLL_CHUNK (8L << 20)
#define MPOL_BIND_ 2
#define MPOL_INTERLEAVE_ 3

static const double SCALAR = NM_SCALAR;

enum { A, B, C };
/* reads and the written array of each kernel, in NM_K_* order */
static const int K_READS[NM_NKERNELS][2] = {{A, -1}, {C, -1}, {A, B}, {B, C}, {A, -1}};
static const int K_WRITES[NM_NKERNELS] = {C, B, C, A, -1};

typedef struct {
    const isa_t *isa;
    int nthreads, nt;
    const int *cpus;
    long n;
    double *arr[3];
    int init[3];
    double init_val[3];
    const int *kernels;
    int nkernels, reps;
    int batch; /* repetitions run back to back per timed sample, no barrier between */
    long skip; /* test hook: element the kernels leave unwritten, -1 none */
    double *times;
    double *partial; /* per-thread sum results */
    int stop;        /* nm_stop seen: the sequence ended before (stop_r, stop_i) */
    int init_cut;    /* nm_stop seen during first touch: no kernel ran, no result */
    int stop_r, stop_i;
    pthread_barrier_t bar;
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_cv;
    int gate; /* 0 wait, 1 go, -1 abort: a thread that failed to start must
                 not leave the others stuck at the barrier */
    int pin_err;
} shared_t;

typedef struct {
    shared_t *s;
    int id;
} targ_t;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Thread id's slice: ceil(n / nthreads) rounded up to NM_SLICE_ALIGN, so
 * every element has an owner even when n / nthreads is already a multiple
 * of it; the last slices may be short or empty. */
static void slice(long n, int nthreads, int id, long *lo, long *hi) {
    long per = ((n + nthreads - 1) / nthreads + NM_SLICE_ALIGN - 1) / NM_SLICE_ALIGN * NM_SLICE_ALIGN;
    *lo = per * id < n ? per * id : n;
    *hi = per * (id + 1) < n ? per * (id + 1) : n;
}

/* Runs kernel k on this thread's slice, honouring the skip hook. */
static double run_slice(shared_t *s, int k, long lo, long hi) {
    double **x = s->arr;
    if (s->skip >= lo && s->skip < hi)
        return stream_isa_kernel(s->isa, k, x[A], x[B], x[C], lo, s->skip, s->nt) +
               stream_isa_kernel(s->isa, k, x[A], x[B], x[C], s->skip + 1, hi, s->nt);
    return stream_isa_kernel(s->isa, k, x[A], x[B], x[C], lo, hi, s->nt);
}

static void *worker(void *p) {
    targ_t *t = p;
    shared_t *s = t->s;
    long lo, hi;
    pthread_mutex_lock(&s->gate_mu);
    while (s->gate == 0) pthread_cond_wait(&s->gate_cv, &s->gate_mu);
    int go = s->gate > 0;
    pthread_mutex_unlock(&s->gate_mu);
    if (!go) return NULL;
    cpu_set_t set;
    CPU_ZERO(&set);
    int cpu = s->cpus[t->id];
    /* a thread that cannot pin still runs (the others wait at the barrier)
     * but the whole run is then refused */
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
        __atomic_store_n(&s->pin_err, 1, __ATOMIC_RELAXED);
    } else {
        CPU_SET(cpu, &set);
        if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) __atomic_store_n(&s->pin_err, 1, __ATOMIC_RELAXED);
    }
    slice(s->n, s->nthreads, t->id, &lo, &hi);
    /* first touch: poison, then give read-before-written arrays their value;
     * a stop here leaves the arrays half made, so no kernel may run */
    for (int x = 0; x < 3 && !__atomic_load_n(&s->init_cut, __ATOMIC_RELAXED); x++) {
        double v = s->init[x] ? s->init_val[x] : NAN;
        for (long j0 = lo; j0 < hi; j0 += NM_POLL_CHUNK) {
            if (nm_stopping()) {
                __atomic_store_n(&s->init_cut, 1, __ATOMIC_RELAXED);
                break;
            }
            long j1 = hi - j0 > NM_POLL_CHUNK ? j0 + NM_POLL_CHUNK : hi;
            for (long j = j0; j < j1; j++) s->arr[x][j] = v;
        }
    }
    pthread_barrier_wait(&s->bar);
    /* the barrier orders every thread's init_cut store before these loads */
    if (__atomic_load_n(&s->init_cut, __ATOMIC_RELAXED)) return NULL;
    /* rep -1 is the untimed warm-up (pages faulted, caches and TLBs warm) */
    for (int r = -1; r < s->reps; r++) {
        for (int i = 0; i < s->nkernels; i++) {
            int k = s->kernels[i];
            /* thread 0 decides, every thread reads it after the barrier (the
             * flag is only ever set), so all stop at the same kernel */
            if (t->id == 0 && !s->stop && nm_stopping()) {
                s->stop_r = r;
                s->stop_i = i;
                __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
            }
            pthread_barrier_wait(&s->bar);
            if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) return NULL;
            double t0 = t->id == 0 ? now() : 0, v = 0;
            for (int b = 0; b < s->batch; b++) v = run_slice(s, k, lo, hi);
            pthread_barrier_wait(&s->bar);
            if (t->id == 0 && r >= 0) s->times[(long)i * s->reps + r] = now() - t0;
            if (k == NM_K_SUM) s->partial[t->id] = v;
        }
    }
    return NULL;
}

static int bind_memory(void *p, size_t len, const int *nodes, int nnodes) {
    unsigned long mask[16] = {0};
    for (int i = 0; i < nnodes; i++) {
        if (nodes[i] < 0 || nodes[i] >= 1024) return EINVAL;
        mask[nodes[i] / 64] |= 1UL << (nodes[i] % 64);
    }
    int mode = nnodes == 1 ? MPOL_BIND_ : MPOL_INTERLEAVE_;
    return syscall(SYS_mbind, p, len, mode, mask, 1024UL, 0U) == 0 ? 0 : errno;
}

/* Scalar replay of the kernel sequence: the value every element must hold. */
static void gold(shared_t *s, double g[3], double *sum_expect) {
    for (int x = 0; x < 3; x++) g[x] = s->init[x] ? s->init_val[x] : NAN;
    *sum_expect = NAN;
    /* as worker(): rep -1 is the warm-up. No kernel reads the array it
     * writes, so the `batch` back-to-back runs of one leave what one run does. */
    for (int r = -1; r < s->reps; r++)
        for (int i = 0; i < s->nkernels; i++) {
            if (s->stop && (r > s->stop_r || (r == s->stop_r && i >= s->stop_i))) return; /* as far as it ran */
            double t[3];
            memcpy(t, g, sizeof t);
            switch (s->kernels[i]) {
            case NM_K_COPY: g[C] = t[A]; break;
            case NM_K_SCALE: g[B] = SCALAR * t[C]; break;
            case NM_K_ADD: g[C] = t[A] + t[B]; break;
            case NM_K_TRIAD: g[A] = t[B] + SCALAR * t[C]; break;
            case NM_K_SUM: *sum_expect = (double)s->n * t[A]; break;
            }
        }
}

static int rel_ok(double got, double want) {
    /* written so that NaN (a poisoned, never written element) fails */
    double d = fabs(got - want), m = fabs(want);
    return m > 0 ? d <= NM_EPS * m : d <= NM_EPS;
}

/* Bad elements (off their gold value g) of x[0, n); with `stoppable`,
 * looking at the stop flag every NM_POLL_CHUNK elements: -1 when a stop
 * cut the count short. */
static long count_bad(const double *x, long n, double g, int stoppable) {
    long bad = 0;
    for (long j0 = 0; j0 < n; j0 += NM_POLL_CHUNK) {
        if (stoppable && nm_stopping()) return -1;
        long j1 = n - j0 > NM_POLL_CHUNK ? j0 + NM_POLL_CHUNK : n;
        for (long j = j0; j < j1; j++) bad += !rel_ok(x[j], g);
    }
    return bad;
}

/* Check every element of every array the sequence used; the count of bad
 * elements per array goes to bad[3], the sum's relative error to *sum_err.
 * 0, or -1 when a stop (Ctrl-C) cut the check short: the samples are then
 * unverified and must not be reported. A sequence the stop already cut
 * (s->stop) is checked in full: that check is what lets its completed
 * repetitions be kept (a read-only pass, ~0.3 s for 3 x 512 MiB here). */
static int check(shared_t *s, long bad[3], double *sum_err) {
    double g[3], sum_expect;
    int used[3] = {0, 0, 0};
    gold(s, g, &sum_expect);
    for (int i = 0; i < s->nkernels; i++) {
        int k = s->kernels[i];
        for (int r = 0; r < 2; r++)
            if (K_READS[k][r] >= 0) used[K_READS[k][r]] = 1;
        if (K_WRITES[k] >= 0) used[K_WRITES[k]] = 1;
    }
    for (int x = 0; x < 3; x++) {
        bad[x] = 0;
        if (!used[x]) continue;
        if ((bad[x] = count_bad(s->arr[x], s->n, g[x], !s->stop)) < 0) return -1;
    }
    *sum_err = 0;
    if (!isnan(sum_expect)) {
        double total = 0;
        for (int t = 0; t < s->nthreads; t++) total += s->partial[t];
        double rel = fabs(total - sum_expect) / fabs(sum_expect);
        *sum_err = isnan(rel) ? INFINITY : rel;
    }
    return 0;
}

/* Which arrays a sequence reads before writing: those get a start value,
 * the others stay NaN so a missed write cannot hide. */
static void plan_init(shared_t *s) {
    int written[3] = {0, 0, 0};
    static const double start[3] = {1.0, 2.0, 0.5};
    for (int x = 0; x < 3; x++) {
        s->init[x] = 0;
        s->init_val[x] = start[x];
    }
    for (int i = 0; i < s->nkernels; i++) {
        int k = s->kernels[i];
        for (int r = 0; r < 2; r++) {
            int x = K_READS[k][r];
            if (x >= 0 && !written[x]) s->init[x] = 1;
        }
        if (K_WRITES[k] >= 0) written[K_WRITES[k]] = 1;
    }
}

int nm_stream_run(const int *cpus, int nthreads, long n, const int *kernels, int nkernels, int reps, int batch, int nt_stores,
                  const int *mem_nodes, int nmem, long skip, double *times, long *bad, double *sum_err,
                  int *reps_done) {
    if (nthreads < 1 || n < 1 || reps < 1 || batch < 1 || nkernels < 1) return EINVAL;
    for (int i = 0; i < nkernels; i++)
        if (kernels[i] < 0 || kernels[i] >= NM_NKERNELS) return EINVAL;
    shared_t s;
    memset(&s, 0, sizeof s);
    if (!(s.isa = stream_isa_resolve())) return NM_E_ISA;
    if (nt_stores && !s.isa->body_nt) return NM_E_NO_NT;
    s.nthreads = nthreads;
    s.nt = nt_stores;
    s.cpus = cpus;
    s.n = n;
    s.kernels = kernels;
    s.nkernels = nkernels;
    s.reps = reps;
    s.batch = batch;
    s.skip = skip;
    s.times = times;
    plan_init(&s);
    /* One mapping, arrays NM_STAGGER apart beyond their length: arrays a
     * power of two apart (256 MiB arrays in adjacent mappings) share every
     * virtual address bit below their size, and on the dev VM's Zen 3 that
     * cost triad 24-46% and copy 7-22% (benchmarks/experiments/stream_ab.c, 11-25
     * rounds; likely the L1D way predictor's linear-address tags and 4K
     * aliasing, which key on those bits; no difference on the device's
     * Xeon). STREAM's OFFSET and likwid's separate allocations avoid it. */
    size_t stride = ((size_t)n * sizeof(double) + NM_ALIGN - 1) / NM_ALIGN * NM_ALIGN + NM_STAGGER;
    size_t len = (3 * stride + NM_ALIGN - 1) / NM_ALIGN * NM_ALIGN;
    int err = 0;
    char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        err = errno;
        base = NULL;
    } else {
#ifdef MADV_HUGEPAGE
        madvise(base, len, MADV_HUGEPAGE); /* best effort: THP may be off */
#endif
        if (nmem > 0) err = bind_memory(base, len, mem_nodes, nmem);
        for (int x = 0; x < 3; x++) s.arr[x] = (double *)(base + x * stride);
    }
    s.partial = calloc(nthreads, sizeof(double));
    pthread_t *th = calloc(nthreads, sizeof(pthread_t));
    targ_t *ta = calloc(nthreads, sizeof(targ_t));
    if (!err && (!s.partial || !th || !ta)) err = ENOMEM;
    int started = 0;
    if (!err) {
        pthread_barrier_init(&s.bar, NULL, nthreads);
        pthread_mutex_init(&s.gate_mu, NULL);
        pthread_cond_init(&s.gate_cv, NULL);
        for (; started < nthreads; started++) {
            ta[started].s = &s;
            ta[started].id = started;
            if ((err = pthread_create(&th[started], NULL, worker, &ta[started])) != 0) break;
        }
        pthread_mutex_lock(&s.gate_mu);
        s.gate = err ? -1 : 1;
        pthread_cond_broadcast(&s.gate_cv);
        pthread_mutex_unlock(&s.gate_mu);
        for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
        pthread_barrier_destroy(&s.bar);
        pthread_mutex_destroy(&s.gate_mu);
        pthread_cond_destroy(&s.gate_cv);
    }
    if (!err && s.pin_err) err = -1;
    /* stopped: the repetitions before stop_r are complete and timed; a stop
     * during first touch or the check leaves none that may be reported */
    *reps_done = s.init_cut ? 0 : s.stop ? (s.stop_r > 0 ? s.stop_r : 0) : reps;
    if (!err && *reps_done > 0 && check(&s, bad, sum_err) != 0) *reps_done = 0;
    if (base) munmap(base, len);
    free(s.partial);
    free(th);
    free(ta);
    return err;
}
