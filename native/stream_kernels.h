/* STREAM kernel template: stream.c includes it once per instruction set, so
 * every ISA runs the very same loops and only the vector width changes.
 * Parameters (#defined before each inclusion, #undefined after it):
 *   NM_ISA   name token (scalar, sse2, avx2, avx512)
 *   NM_ATTR  function attributes: target("...") compiles this copy for its
 *            ISA while the rest of the library stays portable (no -march)
 *   NM_W     doubles per vector
 *   NM_VT    vector type
 *   NM_PFX   prefix of the operations: _mm, _mm256, _mm512 (intrinsics) or
 *            nm_s (scalar stand-ins), joined to _load_pd, _add_pd, ...
 *   NM_NT    1 when the ISA has non-temporal stores
 * Defines isa_<NM_ISA>, an isa_t, and undefines the parameters. Bodies run on [lo, hi) with both ends
 * multiples of NM_W (the caller does the unaligned head and tail), so every
 * load and store is aligned to the vector. */

#define NM_FN(name) NM_CAT(name##_, NM_ISA)
#define NM_OP(op) NM_CAT(NM_PFX, op)
#define NM_LD(p) NM_OP(_load_pd)(p)

/* 4 vectors per step, all loads before all stores (likwid's order): on
 * the dev VM's Zen 3 that gave triad 15% over per-vector load/store pairs
 * (in-process A/B, same noise). EXPR computes vector i. No FMA on purpose:
 * mul + add rounds like the scalar gold replay, so every ISA gives
 * bit-identical arrays. */
#define NM_GROUP(STORE, DST, EXPR)                                       \
    do {                                                                 \
        long j = lo;                                                     \
        for (; j + 4 * NM_W <= hi; j += 4 * NM_W) {                      \
            NM_VT x[4];                                                  \
            for (int u = 0; u < 4; u++) {                                \
                long i = j + u * NM_W;                                   \
                x[u] = EXPR;                                             \
            }                                                            \
            for (int u = 0; u < 4; u++) STORE(DST + j + u * NM_W, x[u]); \
        }                                                                \
        for (long i = j; i < hi; i += NM_W) STORE(DST + i, EXPR);        \
    } while (0)
#define NM_LOOPS(STORE)                                                                                    \
    do {                                                                                                   \
        const NM_VT s = NM_OP(_set1_pd)(SCALAR);                                                           \
        switch (k) {                                                                                       \
        case NM_K_COPY: NM_GROUP(STORE, c, NM_LD(a + i)); break;                                           \
        case NM_K_SCALE: NM_GROUP(STORE, b, NM_OP(_mul_pd)(s, NM_LD(c + i))); break;                       \
        case NM_K_ADD: NM_GROUP(STORE, c, NM_OP(_add_pd)(NM_LD(a + i), NM_LD(b + i))); break;              \
        case NM_K_TRIAD: NM_GROUP(STORE, a, NM_OP(_add_pd)(NM_LD(b + i), NM_OP(_mul_pd)(s, NM_LD(c + i)))); break; \
        }                                                                                                  \
    } while (0)

NM_ATTR static void NM_FN(body)(int k, double *restrict a, double *restrict b, double *restrict c, long lo, long hi) {
    NM_LOOPS(NM_OP(_store_pd));
}

#if NM_NT
/* Non-temporal stores bypass the cache: no write-allocate read. */
NM_ATTR static void NM_FN(body_nt)(int k, double *restrict a, double *restrict b, double *restrict c, long lo,
                                   long hi) {
    NM_LOOPS(NM_OP(_stream_pd));
    _mm_sfence(); /* NT stores are weakly ordered: visible before the barrier */
}
#endif

/* Sum of a[lo, hi) (any ends) in blocks of NM_SUM_BLOCK, 4 vector
 * accumulators inside a block, blocks combined with Kahan compensation:
 * fast, and exact enough to check against n*a. */
NM_ATTR static double NM_FN(sum)(const double *a, long lo, long hi) {
    double total = 0, comp = 0;
    for (long j0 = lo; j0 < hi; j0 += NM_SUM_BLOCK) {
        long j1 = j0 + NM_SUM_BLOCK < hi ? j0 + NM_SUM_BLOCK : hi, j = j0;
        NM_VT acc[4] = {NM_OP(_setzero_pd)(), NM_OP(_setzero_pd)(), NM_OP(_setzero_pd)(), NM_OP(_setzero_pd)()};
        for (; j + 4 * NM_W <= j1; j += 4 * NM_W)
            for (int u = 0; u < 4; u++) acc[u] = NM_OP(_add_pd)(acc[u], NM_OP(_loadu_pd)(a + j + u * NM_W));
        double lane[NM_W], blk = 0;
        NM_OP(_storeu_pd)(lane, NM_OP(_add_pd)(NM_OP(_add_pd)(acc[0], acc[1]), NM_OP(_add_pd)(acc[2], acc[3])));
        for (int u = 0; u < NM_W; u++) blk += lane[u];
        for (; j < j1; j++) blk += a[j];
        double y = blk - comp, t = total + y;
        comp = (t - total) - y;
        total = t;
    }
    return total;
}

static const isa_t NM_FN(isa) = {NM_STR(NM_ISA), NM_W, NM_FN(body),
#if NM_NT
                                 NM_FN(body_nt),
#else
                                 NULL,
#endif
                                 NM_FN(sum)};

#undef NM_FN
#undef NM_OP
#undef NM_LD
#undef NM_GROUP
#undef NM_LOOPS
#undef NM_ISA
#undef NM_ATTR
#undef NM_W
#undef NM_VT
#undef NM_PFX
#undef NM_NT
