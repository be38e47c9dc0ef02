#ifndef NODEMAP_NATIVE_H
#define NODEMAP_NATIVE_H
/* Bump when a signature changes: nodemap/native.py refuses a stale library. */
#define NM_ABI_VERSION 1
int nm_abi_version(void);
int nm_current_cpu(void);
int nm_pin_self(int cpu);
int nm_get_mempolicy(int *mode, unsigned long *mask, unsigned long maxnode);
int nm_set_mempolicy(int mode, const unsigned long *mask, unsigned long maxnode);
#endif
