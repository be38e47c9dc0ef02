/* The node's plan cache (cache.h says what the key holds and when an entry is trusted). */

#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILE (64 << 10)         /* bytes of one sysfs or proc file in the key */
#define MAX_LISTED 4096             /* names of one folder tree in the key */
#define MAX_DEPS 65536              /* module files of one entry */
#define MAX_ENTRY (NM_MAX_PLAN + (8 << 20))  /* a plan, its key and its module list */
#define MAX_CPUS 16384              /* bits of the affinity read */

/* --- text ------------------------------------------------------------------------- */

static void add(struct nm_text *t, const void *s, size_t n)
{
	if (t->failed)
		return;
	if (t->len + n + 1 > t->cap) {
		size_t cap = 2 * (t->len + n + 1);
		char *more = realloc(t->p, cap);
		if (!more) {
			t->failed = 1;
			return;
		}
		t->p = more;
		t->cap = cap;
	}
	memcpy(t->p + t->len, s, n);
	t->len += n;
	t->p[t->len] = '\0';
}

static void addf(struct nm_text *t, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(line))
		t->failed = 1;
	else
		add(t, line, n);
}

/* label, length, bytes: no two keys read alike, whatever the bytes hold */
static void field(struct nm_text *t, const char *label, const char *s, size_t n)
{
	addf(t, "%s %zu\n", label, n);
	add(t, s, n);
	add(t, "\n", 1);
}

/* --- what the plan depends on ----------------------------------------------------- */

const char *nm_env_get(char **env, const char *name)
{
	size_t n = strlen(name);

	for (; env && *env; env++)
		if (!strncmp(*env, name, n) && (*env)[n] == '=')
			return *env + n + 1;
	return NULL;
}

/* A file's content (a sysfs or proc file: its size says nothing), or that it cannot be read. */
static void file_field(struct nm_text *t, const char *path)
{
	char buf[MAX_FILE];
	ssize_t r;
	size_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0) {
		addf(t, "%s unreadable %d\n", path, errno);
		return;
	}
	while (n < sizeof(buf) && (r = read(fd, buf + n, sizeof(buf) - n)) > 0)
		n += r;
	close(fd);
	field(t, path, buf, n);
}

/* The names under dir, to depth more levels (the folders that come and go: devices, MIG instances). */
static void listing(struct nm_text *t, const char *dir, int depth, int *listed)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d) {
		addf(t, "%s absent\n", dir);
		return;
	}
	while ((e = readdir(d))) {
		char sub[1024];
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (++*listed > MAX_LISTED) {
			t->failed = 1;  /* a tree this large is no device list: no cache */
			break;
		}
		if (snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name) >= (int)sizeof(sub)) {
			t->failed = 1;
			break;
		}
		field(t, "name", sub, strlen(sub));
		if (depth > 0 && e->d_type == DT_DIR)
			listing(t, sub, depth - 1, listed);
	}
	closedir(d);
}

static void list_field(struct nm_text *t, const char *dir, int depth)
{
	int listed = 0;
	listing(t, dir, depth, &listed);
}

/* RDMA ports (InfiniBand, Slingshot cxi) and their states: a port that goes down moves tasks to
 * another NIC. */
static void port_states(struct nm_text *t, const char *base)
{
	DIR *d = opendir(base);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char ports[1024];
		DIR *pd;
		struct dirent *p;
		if (e->d_name[0] == '.' || snprintf(ports, sizeof(ports), "%s/%s/ports", base, e->d_name) >= (int)sizeof(ports))
			continue;
		if (!(pd = opendir(ports)))
			continue;
		while ((p = readdir(pd))) {
			char state[1200];
			if (p->d_name[0] != '.' && snprintf(state, sizeof(state), "%s/%s/state", ports, p->d_name) < (int)sizeof(state))
				file_field(t, state);
		}
		closedir(pd);
	}
	closedir(d);
}

/* Network interfaces of devices, their names and link states; where there is none (a network
 * namespace, a container: the planner's NICs are then its virtual Ethernet interfaces, sysfs.py
 * _virtual_nics), every virtual one's link state and flags (up or not). Virtual interfaces beside a
 * device's do not change a plan (a container's veth on the host). Returns how many it added. */
static int net_links_of(struct nm_text *t, int virtual)
{
	const char *base = "/sys/class/net";
	DIR *d = opendir(base);
	struct dirent *e;
	int count = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char link[1024], target[1024], state[1100];
		ssize_t n;
		if (e->d_name[0] == '.' || snprintf(link, sizeof(link), "%s/%s", base, e->d_name) >= (int)sizeof(link) ||
		    (n = readlink(link, target, sizeof(target) - 1)) < 0)
			continue;
		target[n] = '\0';
		if ((strstr(target, "/virtual/") != NULL) != virtual)
			continue;
		snprintf(state, sizeof(state), "%s/operstate", link);
		file_field(t, state);
		/* the carrier too: operstate follows it up to a second later (sysfs.py link_state) */
		snprintf(state, sizeof(state), "%s/carrier", link);
		file_field(t, state);
		if (virtual) {
			snprintf(state, sizeof(state), "%s/flags", link);
			file_field(t, state);
		}
		count++;
	}
	closedir(d);
	return count;
}

static void net_links(struct nm_text *t)
{
	if (!net_links_of(t, 0))
		net_links_of(t, 1);
}

/* This process's CPU affinity (the planner, its child, inherits it) and its allowed lists. */
static void allowed(struct nm_text *t)
{
	size_t size = CPU_ALLOC_SIZE(MAX_CPUS);
	cpu_set_t *set = CPU_ALLOC(MAX_CPUS);
	char status[16384], *line, *save = NULL;
	ssize_t r;
	size_t n = 0;
	int fd;

	if (!set || sched_getaffinity(0, size, set) < 0) {
		t->failed = 1;
	} else {
		add(t, "affinity ", 9);
		for (int c = 0; c < MAX_CPUS; c++)
			if (CPU_ISSET_S(c, size, set))
				addf(t, "%d,", c);
		add(t, "\n", 1);
	}
	CPU_FREE(set);
	if ((fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC)) < 0) {
		t->failed = 1;
		return;
	}
	while (n < sizeof(status) - 1 && (r = read(fd, status + n, sizeof(status) - 1 - n)) > 0)
		n += r;
	close(fd);
	status[n] = '\0';
	for (line = strtok_r(status, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (!strncmp(line, "Cpus_allowed_list:", 18) || !strncmp(line, "Mems_allowed_list:", 18))
			field(t, "status", line, strlen(line));
}

static void identity(struct nm_text *t, const char *label, const struct stat *st)
{
	addf(t, "%s %llu %llu %lld %lld %lld\n", label, (unsigned long long)st->st_dev, (unsigned long long)st->st_ino,
	     (long long)st->st_size, (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec,
	     (long long)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec);
}

int nm_cache_key(char **argv, char **env, struct nm_text *key)
{
	static const char *files[] = {"/proc/sys/kernel/random/boot_id", "/sys/devices/system/cpu/online",
				      "/sys/devices/system/node/online", "/sys/devices/system/node/has_memory",
				      "/sys/devices/system/node/has_cpu", NULL};
	struct stat st;

	memset(key, 0, sizeof(*key));
	add(key, NM_CACHE_SCHEMA "\n", strlen(NM_CACHE_SCHEMA) + 1);
	for (int i = 0; argv[i]; i++)
		field(key, "arg", argv[i], strlen(argv[i]));
	if (stat(argv[0], &st) < 0)
		key->failed = 1;
	else
		identity(key, "exe", &st);
	for (int i = 0; env && env[i]; i++)
		if (strncmp(env[i], NM_CACHE_KEY_VAR "=", strlen(NM_CACHE_KEY_VAR) + 1))
			field(key, "env", env[i], strlen(env[i]));
	for (int i = 0; files[i]; i++)
		file_field(key, files[i]);
	allowed(key);
	list_field(key, "/sys/bus/pci/devices", 0);
	net_links(key);
	port_states(key, "/sys/class/infiniband");
	port_states(key, "/sys/class/cxi");
	list_field(key, "/proc/driver/nvidia/gpus", 0);
	list_field(key, "/proc/driver/nvidia/capabilities", 4);  /* gpuN/mig/giK/ciM: MIG instances */
	list_field(key, "/sys/class/kfd/kfd/topology/nodes", 0);
	if (key->failed || key->len > NM_CACHE_MAX_KEY) {
		free(key->p);
		memset(key, 0, sizeof(*key));
		return -1;
	}
	return 0;
}

/* --- entries ---------------------------------------------------------------------- */

static uint32_t crc32_of(const char *s, size_t n)
{
	uint32_t table[256], c = 0xffffffffu;

	for (uint32_t i = 0; i < 256; i++) {
		uint32_t v = i;
		for (int k = 0; k < 8; k++)
			v = v & 1 ? 0xedb88320u ^ (v >> 1) : v >> 1;
		table[i] = v;
	}
	for (size_t i = 0; i < n; i++)
		c = table[(c ^ (unsigned char)s[i]) & 0xff] ^ (c >> 8);
	return c ^ 0xffffffffu;
}

static uint32_t adler32_of(const char *s, size_t n)
{
	uint32_t a = 1, b = 0;

	for (size_t i = 0; i < n; i++) {
		a = (a + (unsigned char)s[i]) % 65521;
		b = (b + a) % 65521;
	}
	return b << 16 | a;
}

/* The cache folder, opened when it is a real directory of this user with mode 0700; else -1. */
static int open_folder(char **env)
{
	char path[4096];
	const char *dir = nm_env_get(env, "NODEMAP_CACHE_DIR"), *tmp = nm_env_get(env, "TMPDIR");
	struct stat st;
	int fd, n;

	if (dir && *dir)
		n = snprintf(path, sizeof(path), "%s", dir);
	else
		n = snprintf(path, sizeof(path), "%s/nodemap-%u", tmp && *tmp ? tmp : "/tmp", (unsigned)geteuid());
	if (n < 0 || (size_t)n >= sizeof(path))
		return -1;
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 0777) != 0700) {
		close(fd);
		return -1;
	}
	return fd;
}

static void entry_name(const struct nm_text *key, char *name, size_t len)
{
	snprintf(name, len, "spank-%08x%08x", crc32_of(key->p, key->len), adler32_of(key->p, key->len));
}

/* The whole entry file of key, when it is a regular file of this user that no one else may
 * write (not a link); its size in *size. */
static char *read_entry(char **env, const struct nm_text *key, size_t *size)
{
	char name[64], *buf = NULL;
	struct stat st;
	size_t n = 0;
	ssize_t r;
	int dfd = open_folder(env), fd;

	if (dfd < 0)
		return NULL;
	entry_name(key, name, sizeof(name));
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	close(dfd);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) ||
	    st.st_nlink != 1 || st.st_size < 1 || st.st_size > MAX_ENTRY || !(buf = malloc(st.st_size + 1))) {
		close(fd);
		return NULL;
	}
	while (n < (size_t)st.st_size && (r = read(fd, buf + n, st.st_size - n)) > 0)
		n += r;
	close(fd);
	if (n != (size_t)st.st_size) {
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*size = n;
	return buf;
}

/* "WORD NUMBER\n" at *at (within end): the number, or -1. */
static long long number_line(char **at, const char *end, const char *word)
{
	size_t w = strlen(word);
	char *p = *at, *stop;
	long long v;

	if ((size_t)(end - p) < w + 2 || memcmp(p, word, w) || p[w] != ' ' || p[w + 1] < '0' || p[w + 1] > '9')
		return -1;
	errno = 0;
	v = strtoll(p + w + 1, &stop, 10);
	if (errno || stop >= end || *stop != '\n')
		return -1;
	*at = stop + 1;
	return v;
}

/* Whether every module that made the plan is still the file it was. */
static int deps_unchanged(char **at, const char *end, long long count)
{
	for (long long i = 0; i < count; i++) {
		unsigned long long dev, ino;
		long long size, mtime, ctime;
		int used = 0;
		char *nl = memchr(*at, '\n', end - *at);
		struct stat st;
		if (!nl)
			return 0;
		*nl = '\0';  /* the path ends the line */
		if (sscanf(*at, "%llu %llu %lld %lld %lld %n", &dev, &ino, &size, &mtime, &ctime, &used) != 5 || !used ||
		    (*at)[used] != '/' || stat(*at + used, &st) < 0)
			return 0;
		if (st.st_dev != dev || st.st_ino != ino || st.st_size != size ||
		    st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec != mtime ||
		    st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec != ctime)
			return 0;
		*at = nl + 1;
	}
	return 1;
}

char *nm_cache_load(char **env, const struct nm_text *key)
{
	static const char head[] = NM_CACHE_SCHEMA "\n";
	size_t size = 0;
	char *buf = read_entry(env, key, &size), *at, *end, *plan = NULL, crc[16];
	long long made, keylen, count, planlen;
	time_t now = time(NULL);

	if (!buf)
		return NULL;
	end = buf + size;
	/* whole: the CRC-32 of everything before its line */
	if (size < sizeof(head) + 13 || memcmp(end - 13, "crc ", 4) || end[-1] != '\n')
		goto miss;
	snprintf(crc, sizeof(crc), "%08x", crc32_of(buf, size - 13));
	if (memcmp(end - 9, crc, 8))
		goto miss;
	end -= 13;
	at = buf;
	if (memcmp(at, head, sizeof(head) - 1))
		goto miss;
	at += sizeof(head) - 1;
	/* made within the TTL: not older, and not in the future (a clock set back, a planted time) */
	if ((made = number_line(&at, end, "made")) < 0 || now < made || now - made > NM_CACHE_TTL)
		goto miss;
	if ((keylen = number_line(&at, end, "key")) < 0 || (size_t)keylen != key->len || end - at < keylen + 1 ||
	    memcmp(at, key->p, key->len) || at[keylen] != '\n')
		goto miss;
	at += keylen + 1;
	if ((count = number_line(&at, end, "deps")) < 0 || count > MAX_DEPS || !deps_unchanged(&at, end, count))
		goto miss;
	if ((planlen = number_line(&at, end, "plan")) < 0 || planlen > NM_MAX_PLAN || end - at != planlen + 1 ||
	    at[planlen] != '\n')
		goto miss;
	if ((plan = malloc(planlen + 1))) {
		memcpy(plan, at, planlen);
		plan[planlen] = '\0';
	}
miss:
	free(buf);
	return plan;
}

void nm_cache_drop(char **env, const struct nm_text *key)
{
	char name[64];
	int dfd = open_folder(env);

	if (dfd < 0)
		return;
	entry_name(key, name, sizeof(name));
	unlinkat(dfd, name, 0);
	close(dfd);
}
