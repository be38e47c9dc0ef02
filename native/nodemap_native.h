#ifndef NODEMAP_NATIVE_H
#define NODEMAP_NATIVE_H
/* Bump when a signature changes: nodemap/native.py refuses a stale library. */
#define NM_ABI_VERSION 4
int nm_abi_version(void);
int nm_current_cpu(void);
int nm_pin_self(int cpu);
int nm_get_mempolicy(int *mode, unsigned long *mask, unsigned long maxnode);
int nm_set_mempolicy(int mode, const unsigned long *mask, unsigned long maxnode);
/* The stop flag (Ctrl-C): long kernels poll it between repetitions or
 * kernels and return early with what they completed (*reps_done). */
void nm_stop(int on);
int nm_stopping(void);
/* STREAM kernels of native/stream.c, in its K_READS/K_WRITES order. */
enum { NM_K_COPY, NM_K_SCALE, NM_K_ADD, NM_K_TRIAD, NM_K_SUM, NM_NKERNELS };
/* 0, an errno value, -1 (a thread could not be pinned), NM_E_ISA or
 * NM_E_NO_NT. Kernels of the ISA nm_stream_isa() names. */
enum { NM_E_ISA = -3, NM_E_NO_NT = -4 };
int nm_stream_run(const int *cpus, int nthreads, long n, const int *kernels, int nkernels, int reps, int batch, int nt_stores,
                  const int *mem_nodes, int nmem, long skip, double *times, long *bad, double *sum_err,
                  int *reps_done);
/* stream_isa.c: the STREAM kernels' instruction set (scalar, sse2, avx2,
 * avx512): NODEMAP_STREAM_ISA when set, else the best this CPU runs. NULL
 * when the variable names an unknown or unsupported one. */
const char *nm_stream_isa(void);
/* 1 this CPU runs it, 0 known but not here, -1 unknown name. */
int nm_stream_isa_supported(const char *name);
int nm_mbind_node(void *addr, unsigned long len, int node);
int nm_page_nodes(void *addr, unsigned long count, unsigned long stride, int *out);
/* latency.c: pointer chase over a random cycle (see latency.c) */
#include <stddef.h>
int nm_latency_run(size_t bytes, size_t line, int cpu, const int *mem_nodes, int nmem, int reps, long min_loads,
                   unsigned long long seed, double *ns, long *steps_to_return, int *reps_done);
#endif
