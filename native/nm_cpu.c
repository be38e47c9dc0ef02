/* Small process-level helpers: which CPU am I on, pin the calling thread,
 * read and set the memory policy. Used by launch, show and the benchmarks. */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nodemap_native.h"

int nm_abi_version(void) { return NM_ABI_VERSION; }

/* Set by the harness's SIGINT handler (from Python, while the kernel runs
 * in another thread); read by the kernels between repetitions. */
static int stop_flag;
void nm_stop(int on) { __atomic_store_n(&stop_flag, on, __ATOMIC_RELAXED); }
int nm_stopping(void) { return __atomic_load_n(&stop_flag, __ATOMIC_RELAXED); }

/* The CPU the calling thread runs on right now (sched_getcpu), -1 on error. */
int nm_current_cpu(void) { return sched_getcpu(); }

/* Pin the calling thread to one CPU; returns 0 or an errno value. */
int nm_pin_self(int cpu) {
    cpu_set_t set;
    if (cpu < 0 || cpu >= CPU_SETSIZE) return EINVAL;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof(set), &set) == 0 ? 0 : errno;
}

/* get_mempolicy/set_mempolicy through raw syscalls: no libnuma needed.
 * mask is an array of unsigned long words, maxnode the number of bits. */
int nm_get_mempolicy(int *mode, unsigned long *mask, unsigned long maxnode) {
    long r = syscall(SYS_get_mempolicy, mode, mask, maxnode, (void *)0, 0UL);
    return r == 0 ? 0 : errno;
}

int nm_set_mempolicy(int mode, const unsigned long *mask, unsigned long maxnode) {
    long r = syscall(SYS_set_mempolicy, mode, mask, maxnode);
    return r == 0 ? 0 : errno;
}
