/*
 * The node's plan cache, read in C: a step whose plan the node has made
 * before binds its tasks without starting Python (`nodemap plan` costs
 * 0.24 s a step on the CI VM; a hit costs well under a millisecond).
 *
 * A plan depends on the command line and environment it is made with and
 * on the node. The key holds all of those that can change while the node
 * runs: `nodemap plan`'s argv and the identity of its executable, its whole
 * environment (the job's GPU visibility, PATH, ...), the boot, the online
 * CPUs and memory nodes, this process's allowed CPUs and memory nodes
 * (affinity and cgroup cpuset, as the planner reads them), the PCI devices
 * present, the network interfaces of devices (not virtual ones) and their
 * link states, RDMA port states, the NVIDIA GPUs and MIG instances the
 * driver holds, the AMD KFD nodes. What else a plan reads from
 * sysfs is fixed until a reboot, which changes the boot id. The entry also
 * names every nodemap module that made it (path, device, inode, size,
 * modification and change times; an upgrade or an edit misses) and the time
 * it was made: older than NM_CACHE_TTL, or made in the future, it misses.
 *
 * Entries are written by `nodemap plan --emit tasks` (mapping/spankcache.py)
 * when NM_CACHE_KEY_VAR holds the key, into nodemap's private plan-cache
 * folder (mapping/plancache.py: $NODEMAP_CACHE_DIR, else $TMPDIR/nodemap-UID).
 * Trusted only when that folder is a real directory of this user with mode
 * 0700 (opened with O_NOFOLLOW), and the entry a regular file of this user
 * that no one else may write, not a link, whole (its CRC-32 matches) and
 * for exactly this key. Anything else is a miss: `nodemap plan` runs.
 *
 * Entry (text): "nodemap.spankcache/1\n" "made SECONDS\n" "key BYTES\n" KEY "\n"
 * "deps COUNT\n" COUNT x "DEV INO SIZE MTIME_NS CTIME_NS PATH\n" "plan BYTES\n"
 * PLAN "\n" "crc XXXXXXXX\n" (CRC-32 of everything before it); its name is
 * spank-CRC32ADLER32 of the key (as plancache.entry_name spreads its keys).
 */
#ifndef NODEMAP_CACHE_H
#define NODEMAP_CACHE_H

#include <stddef.h>

#include "apply.h"

#define NM_CACHE_SCHEMA "nodemap.spankcache/1"
#define NM_CACHE_KEY_VAR "NODEMAP_SPANK_KEY"  /* the key, to `nodemap plan`: it writes the entry */
#define NM_CACHE_TTL 600                       /* s, as mapping/plancache.TTL */
#define NM_CACHE_MAX_KEY (96 << 10)            /* an environment string holds at most 128 KiB */

/* Growable text; failed is set when memory ran out (the text is then not used). */
struct nm_text {
	char *p;
	size_t len, cap;
	int failed;
};

/* The key of the plan argv makes with env on this node, now; 0, or -1 (no cache this time). */
NM_HIDDEN int nm_cache_key(char **argv, char **env, struct nm_text *key);
/* The plan cached under key (malloc'd, NUL-terminated), or NULL: none, stale, or not trusted. */
NM_HIDDEN char *nm_cache_load(char **env, const struct nm_text *key);
/* Remove key's entry (its plan is not what the planner printed: a wrapper changed it). */
NM_HIDDEN void nm_cache_drop(char **env, const struct nm_text *key);
/* The value of name in env (NAME=VALUE entries), or NULL. */
NM_HIDDEN const char *nm_env_get(char **env, const char *name);

#endif
