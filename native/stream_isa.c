/* The STREAM kernels once per instruction set (stream_kernels.h), and the
 * runtime choice among them. The library is built without -march so that
 * one build runs on any x86-64; the AVX2 and AVX-512 copies are compiled
 * with target attributes and only called when the CPU (and the OS, which
 * must save the wider registers) supports them. */
#include <stdlib.h>
#include <string.h>

#include "nodemap_native.h"
#include "stream_isa.h"

#define NM_CAT_(a, b) a##b
#define NM_CAT(a, b) NM_CAT_(a, b)
#define NM_STR_(x) #x
#define NM_STR(x) NM_STR_(x)
/* A pattern-matched memcpy would be glibc's, which switches to NT stores
 * for large sizes: "plain" copy would not be plain. */
#define NM_NO_MEMCPY "no-tree-loop-distribute-patterns"

static const double SCALAR = NM_SCALAR;

/* Scalar stand-ins for the intrinsics, so the scalar kernels come from the
 * same template. */
static inline double nm_s_load_pd(const double *p) { return *p; }
static inline double nm_s_loadu_pd(const double *p) { return *p; }
static inline void nm_s_store_pd(double *p, double v) { *p = v; }
static inline void nm_s_storeu_pd(double *p, double v) { *p = v; }
static inline double nm_s_set1_pd(double v) { return v; }
static inline double nm_s_setzero_pd(void) { return 0; }
static inline double nm_s_add_pd(double x, double y) { return x + y; }
static inline double nm_s_mul_pd(double x, double y) { return x * y; }

#if defined(__x86_64__)
#include <immintrin.h>
/* movnti: x86-64's scalar non-temporal store (likwid's copy_mem) */
static inline void nm_s_stream_pd(double *p, double v) {
    long long bits;
    memcpy(&bits, &v, sizeof bits);
    _mm_stream_si64((long long *)p, bits);
}
#define NM_SCALAR_NT 1
#else
#define NM_SCALAR_NT 0
#endif

/* scalar: really one element at a time, the reference the vectors beat */
#define NM_ISA scalar
#define NM_ATTR __attribute__((optimize("no-tree-vectorize", NM_NO_MEMCPY)))
#define NM_W 1
#define NM_VT double
#define NM_PFX nm_s
#define NM_NT NM_SCALAR_NT
#include "stream_kernels.h"

#if defined(__x86_64__)
#define NM_ATTR_X86(isa) __attribute__((target(isa), optimize(NM_NO_MEMCPY)))

#define NM_ISA sse2
#define NM_NT 1
#define NM_ATTR NM_ATTR_X86("sse2")
#define NM_W 2
#define NM_VT __m128d
#define NM_PFX _mm
#include "stream_kernels.h"

#define NM_ISA avx2
#define NM_NT 1
#define NM_ATTR NM_ATTR_X86("avx2")
#define NM_W 4
#define NM_VT __m256d
#define NM_PFX _mm256
#include "stream_kernels.h"

#define NM_ISA avx512
#define NM_NT 1
#define NM_ATTR NM_ATTR_X86("avx512f")
#define NM_W 8
#define NM_VT __m512d
#define NM_PFX _mm512
#include "stream_kernels.h"
#endif

static int runs_everywhere(void) { return 1; }
#if defined(__x86_64__)
/* libgcc checks the OS saves the wider registers (XCR0) too;
 * __builtin_cpu_init is needed when called before constructors ran. */
static int runs_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}
static int runs_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}
#endif

/* Known ISAs, narrowest first; NULL kernels: not built for this target. */
static const struct {
    const char *name;
    const isa_t *kernels;
    int (*runs)(void);
} ISAS[] = {
    {"scalar", &isa_scalar, runs_everywhere},
#if defined(__x86_64__)
    {"sse2", &isa_sse2, runs_everywhere},
    {"avx2", &isa_avx2, runs_avx2},
    {"avx512", &isa_avx512, runs_avx512},
#else
    {"sse2", NULL, NULL},
    {"avx2", NULL, NULL},
    {"avx512", NULL, NULL},
#endif
};
#define NISAS (int)(sizeof ISAS / sizeof ISAS[0])

static int cpu_runs(int i) { return ISAS[i].kernels && ISAS[i].runs(); }

static int find(const char *name) {
    for (int i = 0; name && i < NISAS; i++)
        if (strcmp(name, ISAS[i].name) == 0) return i;
    return -1;
}

int nm_stream_isa_supported(const char *name) {
    int i = find(name);
    return i < 0 ? -1 : cpu_runs(i);
}

const isa_t *stream_isa_resolve(void) {
    const char *want = getenv("NODEMAP_STREAM_ISA");
    if (want && *want) {
        int i = find(want);
        return i >= 0 && cpu_runs(i) ? ISAS[i].kernels : NULL;
    }
    for (int i = NISAS - 1; i >= 0; i--)
        if (cpu_runs(i)) return ISAS[i].kernels;
    return NULL;
}

const char *nm_stream_isa(void) {
    const isa_t *isa = stream_isa_resolve();
    return isa ? isa->name : NULL;
}

double stream_isa_kernel(const isa_t *isa, int k, double *a, double *b, double *c, long lo, long hi, int nt) {
    if (k == NM_K_SUM) return isa->sum(a, lo, hi);
    /* the vector body gets the aligned middle (arrays start 64 B aligned,
     * so index alignment is address alignment); scalar loops the ends */
    long w = isa->width, mid = (lo + w - 1) / w * w;
    mid = mid < hi ? mid : hi;
    long end = mid + (hi - mid) / w * w;
    isa_scalar.body(k, a, b, c, lo, mid);
    (nt ? isa->body_nt : isa->body)(k, a, b, c, mid, end);
    isa_scalar.body(k, a, b, c, end, hi);
    return 0;
}
