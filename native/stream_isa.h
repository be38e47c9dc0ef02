/* Internal to stream.c and stream_isa.c: the STREAM kernels of one
 * instruction set, and the choice among them. */
#ifndef NODEMAP_STREAM_ISA_H
#define NODEMAP_STREAM_ISA_H

/* sqrt(2)-1 makes copy;scale;add;triad map a to a*s*(2+s) = a: values stay
 * bounded for any number of repetitions (STREAM's 3.0 grows 15x per rep). */
#define NM_SCALAR 0.41421356237309504880
#define NM_SUM_BLOCK 512 /* keeps the sum's rounding error far below 1e-13 */
/* Slices start on 64 B boundaries: no cache line is shared between threads,
 * and every slice starts aligned for the widest vector (AVX-512). */
#define NM_SLICE_ALIGN 8

typedef void (*nm_body_fn)(int k, double *restrict a, double *restrict b, double *restrict c, long lo, long hi);
typedef struct {
    const char *name;
    int width; /* doubles per vector */
    nm_body_fn body, body_nt; /* body_nt NULL: no non-temporal stores */
    double (*sum)(const double *a, long lo, long hi);
} isa_t;

/* The ISA NODEMAP_STREAM_ISA names, else the best this CPU runs; NULL when
 * the variable names an unknown or unsupported ISA. */
const isa_t *stream_isa_resolve(void);
/* Kernel k over [lo, hi) of any alignment; the sum's value, else 0. */
double stream_isa_kernel(const isa_t *isa, int k, double *a, double *b, double *c, long lo, long hi, int nt);
#endif
