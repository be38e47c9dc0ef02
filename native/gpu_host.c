/* Host buffers for GPU copy benchmarks: bind a buffer's pages to one NUMA
 * node before cudaHostRegister pins them, and read back where the pages
 * really are (the kernel may ignore a policy: cpuset.mems, full node). */
#include <errno.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nodemap_native.h"

#define NM_MPOL_BIND 2
#define NM_MPOL_MF_STRICT (1 << 0)
#define NM_MPOL_MF_MOVE (1 << 1)

/* mbind(addr, len) to a single node, moving pages already faulted in.
 * Returns 0 or an errno value. */
int nm_mbind_node(void *addr, unsigned long len, int node) {
    unsigned long mask[16] = {0};
    if (node < 0 || node >= 1024) return EINVAL;
    mask[node / 64] |= 1UL << (node % 64);
    long r = syscall(SYS_mbind, addr, len, NM_MPOL_BIND, mask, 1024UL,
                     NM_MPOL_MF_STRICT | NM_MPOL_MF_MOVE);
    return r == 0 ? 0 : errno;
}

/* The node of `count` pages starting at addr, `stride` bytes apart, into
 * out[] (negative errno for a page that is not present). move_pages with no
 * target nodes only reports. Returns 0 or an errno value. */
int nm_page_nodes(void *addr, unsigned long count, unsigned long stride, int *out) {
    enum { CHUNK = 512 };
    void *pages[CHUNK];
    for (unsigned long i = 0; i < count; i += CHUNK) {
        unsigned long n = count - i < CHUNK ? count - i : CHUNK;
        for (unsigned long k = 0; k < n; k++) pages[k] = (char *)addr + (i + k) * stride;
        long r = syscall(SYS_move_pages, 0, n, pages, (void *)0, out + i, 0);
        if (r != 0) return errno;
    }
    return 0;
}
