/* The plugin's planning and per-task binding without spank.h (apply.h says why). */

#include "apply.h"
#include "cache.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ERR_TAIL 4096  /* bytes of the planner's stderr kept: its last line says the error */
#define PLAN_TIMEOUT_S 120
#define MPOL_BIND_MODE 2

/* Control characters (a terminal escape, a line break) of a message from outside as '?': it is
 * printed as one line on the job's stderr and in slurmd's log. */
static void one_line(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
}

/* --- options ----------------------------------------------------------------------- */

/* One request option, its value checked with `nodemap plan`'s own limits (cliargs.py), so a wrong
 * value is refused by srun when the option is given, not found in every task later. */
struct request_key {
	const char *key, *flag, *value_help;
	long least;  /* -1: a count or one of the words all, auto (nic-rails) */
};

static const struct request_key request_keys[] = {
	{"threads=", "--threads", "T must be a whole number from 1 to 1048576", 1},
	{"smt=", "--smt", "K must be a whole number from 0 to 1048576", 0},
	{"gpus-per-task=", "--gpus-per-task", "G must be a whole number from 0 to 1048576", 0},
	{"nic-rails=", "--nic-rails", "R must be a count (0 to 999999), all or auto", -1},
};

/* value in canonical form (no leading zeros) into out, or -1 */
static int request_value(const struct request_key *k, const char *value, char *out, size_t len)
{
	size_t digits = strspn(value, "0123456789");
	long v;

	if (k->least < 0 && (!strcmp(value, "all") || !strcmp(value, "auto"))) {
		snprintf(out, len, "%s", value);
		return 0;
	}
	if (!digits || value[digits])
		return -1;
	if (k->least < 0 ? digits > 6 : digits - strspn(value, "0") > 7)  /* nic-rails: 6 characters, as cliargs */
		return -1;
	v = strtol(value + (k->least < 0 ? 0 : strspn(value, "0")), NULL, 10);
	if (k->least >= 0 && (v < k->least || v > NM_MAX_COUNT))
		return -1;
	snprintf(out, len, "%ld", v);
	return 0;
}

int nm_parse_options(const char *optarg, struct nm_options *o, char *why, size_t whylen)
{
	char buf[NM_MAX_OPTARG + 1], *save = NULL, values[sizeof(request_keys) / sizeof(request_keys[0])][16] = {{0}};
	size_t nkeys = sizeof(request_keys) / sizeof(request_keys[0]);

	o->enabled = 1;
	o->request[0] = '\0';
	why[0] = '\0';
	if (!optarg || !*optarg)
		return 0;
	if (strlen(optarg) > NM_MAX_OPTARG) {
		snprintf(why, whylen, "--nodemap=%.40s...: too long (%zu characters, at most %d; " NM_OPTIONS_HELP ")",
			 optarg, strlen(optarg), NM_MAX_OPTARG);
		one_line(why);
		return -1;
	}
	strcpy(buf, optarg);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t k;
		if (!strcmp(tok, "off") || !strcmp(tok, "on")) {
			o->enabled = !strcmp(tok, "on");
			continue;
		}
		if (!strcmp(tok, "strict") || !strcmp(tok, "verbose")) {
			*(tok[0] == 's' ? &o->strict : &o->verbose) = 1;
			continue;
		}
		for (k = 0; k < nkeys; k++)
			if (!strncmp(tok, request_keys[k].key, strlen(request_keys[k].key)))
				break;
		if (k == nkeys) {
			snprintf(why, whylen, "--nodemap=%.200s: '%.100s' is not an option (" NM_OPTIONS_HELP ")", optarg,
				 tok);
			one_line(why);
			return -1;
		}
		if (request_value(&request_keys[k], tok + strlen(request_keys[k].key), values[k], sizeof(values[k])) < 0) {
			snprintf(why, whylen, "--nodemap=%.200s: %.100s: %s", optarg, tok, request_keys[k].value_help);
			one_line(why);
			return -1;
		}
	}
	/* a key given twice: its last value, as `nodemap plan` would take it */
	for (size_t k = 0, used = 0; k < nkeys; k++)
		if (values[k][0])
			used += snprintf(o->request + used, sizeof(o->request) - used, "%s %s ", request_keys[k].flag,
					 values[k]);
	return 0;
}

/* --- planning ---------------------------------------------------------------------- */

/* Whether the effective user may run path: slurmstepd's real uid is root, which access(2) would
 * ask about (root may run any file with an x bit), and the job's user then could not. */
static int runnable(const char *path)
{
	return faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) == 0;
}

int nm_find_nodemap(const char *configured, char *path, char *out, size_t len)
{
	char *save = NULL;

	if (configured && *configured) {
		snprintf(out, len, "%s", configured);
		return runnable(out) ? 0 : -1;
	}
	if (!path)
		return -1;
	for (char *dir = strtok_r(path, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(out, len, "%s/nodemap", *dir ? dir : ".");
		if (runnable(out))
			return 0;
	}
	return -1;
}

void nm_plan_argv(char **argv, char *exe, char *count, unsigned n, char *cores, char *request)
{
	/* the launcher chose the task count: more tasks than PUs share them (as `nodemap run` under a launcher) */
	char *head[] = {exe, "plan", "--tasks", count, "--emit", "tasks", "--oversubscribe"};
	int argc = 0;
	char *save = NULL;

	snprintf(count, 16, "%u", n);
	for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
		argv[argc++] = head[i];
	/* plan within the step's cores (Slurm's logical core numbers, as hwloc's) */
	if (cores && *cores) {
		argv[argc++] = "--slurm-cores";
		argv[argc++] = cores;
	}
	for (char *w = strtok_r(request, " ", &save); w && argc < NM_PLAN_ARGS - 2; w = strtok_r(NULL, " ", &save))
		argv[argc++] = w;
	argv[argc] = NULL;
}

/* The last line of text that holds more than blanks, into err. */
static void last_line(char *text, char *err, size_t errlen)
{
	char *end = text + strlen(text), *line;

	while (end > text && strchr(" \t\r\n", end[-1]))
		end--;
	*end = '\0';
	line = end;
	while (line > text && line[-1] != '\n')
		line--;
	snprintf(err, errlen, "%s", line);
	one_line(err);
}

/* In the child, before exec: slurmstepd runs plugins with only its effective ids set to the job's
 * user (real and saved stay root), and exec keeps them, so the planner (found in the job's own
 * PATH) could set its uid back to 0. All three ids become the effective ones first. */
static void only_the_effective_user(void)
{
	gid_t g = getegid();
	uid_t u = geteuid();

	if (setresgid(g, g, g) < 0 || setresuid(u, u, u) < 0) {
		dprintf(2, "nodemap: cannot drop the real user id to the job's (%s): not run\n", strerror(errno));
		_exit(126);
	}
}

int nm_run(char **argv, char **env, char **out, char *err, size_t errlen)
{
	int po[2], pe[2], status = 0, over = 0;
	size_t used = 0, eused = 0, cap = 65536;
	char *buf = malloc(cap), tail[ERR_TAIL + 1] = "";
	time_t deadline = time(NULL) + PLAN_TIMEOUT_S;
	pid_t pid;

	err[0] = '\0';
	*out = NULL;
	if (!buf || pipe2(po, O_CLOEXEC)) {
		free(buf);
		snprintf(err, errlen, "cannot make a pipe (%s)", strerror(errno));
		return -1;
	}
	if (pipe2(pe, O_CLOEXEC)) {
		snprintf(err, errlen, "cannot make a pipe (%s)", strerror(errno));
		close(po[0]);  /* the first pipe, made: slurmstepd lives on, so it must not leak */
		close(po[1]);
		free(buf);
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		dup2(po[1], 1);
		dup2(pe[1], 2);
		only_the_effective_user();
		execve(argv[0], argv, env);
		dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	if (pid < 0) {
		close(po[0]);
		close(pe[0]);
		free(buf);
		snprintf(err, errlen, "cannot fork (%s)", strerror(errno));
		return -1;
	}
	struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
	int open_fds = 2;
	while (open_fds && time(NULL) < deadline) {
		if (poll(fds, 2, 1000) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < 2; i++) {
			char tmp[4096];
			ssize_t r;
			if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			r = read(fds[i].fd, tmp, sizeof(tmp));
			if (r <= 0) {
				close(fds[i].fd);
				fds[i].fd = -1;
				open_fds--;
				continue;
			}
			if (i == 0) {
				if (over || used + r + 1 > NM_MAX_PLAN + 1) {
					over = 1;  /* keep draining (the planner must not block); the plan is refused below */
					continue;
				}
				if (used + r + 1 > cap) {
					char *more = realloc(buf, cap = 2 * (used + r + 1));
					if (!more) {
						over = 2;
						continue;
					}
					buf = more;
				}
				memcpy(buf + used, tmp, r);
				used += r;
			} else {  /* the last ERR_TAIL bytes: an error is said last, after argparse's usage lines */
				if (eused + r > ERR_TAIL) {
					size_t drop = eused + r - ERR_TAIL < eused ? eused + r - ERR_TAIL : eused;
					memmove(tail, tail + drop, eused - drop);
					eused -= drop;
				}
				size_t take = (size_t)r > ERR_TAIL ? ERR_TAIL : (size_t)r;
				memcpy(tail + eused, tmp + r - take, take);
				eused += take;
				tail[eused] = '\0';
			}
		}
	}
	if (open_fds) {
		kill(pid, SIGKILL);
		for (int i = 0; i < 2; i++)
			if (fds[i].fd >= 0)
				close(fds[i].fd);
	}
	int waited;
	while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
		;
	int wait_errno = errno;
	buf[used] = '\0';
	*out = buf;
	for (size_t i = 0; i < eused; i++)
		if (!tail[i])
			tail[i] = ' ';  /* a NUL in the message would end it early */
	last_line(tail, err, errlen);
	if (open_fds) {
		snprintf(err, errlen, "`nodemap plan` took more than %d s", PLAN_TIMEOUT_S);
		return -1;
	}
	if (waited < 0) {  /* ECHILD (SIGCHLD ignored: reaped unseen): how it ended is unknown, not a success */
		snprintf(err, errlen, "cannot tell how `nodemap plan` ended (waitpid: %s)", strerror(wait_errno));
		return -1;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -1;
	if (over) {  /* its first part is no plan: refused, as a plan this code cannot read */
		if (over == 2)
			snprintf(err, errlen, "no memory for its plan (%zu bytes read)", used);
		else
			snprintf(err, errlen, "its plan is over %d MiB: refused (not cut: a part of a plan binds wrongly)",
				 NM_MAX_PLAN >> 20);
		return -1;
	}
	return 0;
}

/* "0-3,8" into a bit set of `nbits` bits; -1 on anything else. */
static int parse_list(const char *text, unsigned long *bits, size_t nbits)
{
	const char *p = text;

	while (*p) {
		char *end;
		long a = strtol(p, &end, 10), b = a;
		if (end == p || a < 0)
			return -1;
		if (*end == '-') {
			p = end + 1;
			b = strtol(p, &end, 10);
			if (end == p || b < a)
				return -1;
		}
		if ((size_t)b >= nbits)
			return -1;
		for (long i = a; i <= b; i++)
			bits[i / NM_ULONG_BITS] |= 1UL << (i % NM_ULONG_BITS);
		if (*end == ',')
			end++;
		else if (*end)
			return -1;
		p = end;
	}
	return 0;
}

/* How many tab-separated fields text holds (none when NULL): room for a task's variables, however
 * many its line gives (a fixed array kept the first 256 and dropped the rest without a word). */
static size_t fields_in(const char *text)
{
	size_t n = text ? 1 : 0;

	for (; text && *text; text++)
		n += *text == '\t';
	return n;
}

int nm_parse_plan(char *text, int n, struct nm_task **out)
{
	char *save = NULL;
	int k = 0;
	struct nm_task *tasks = calloc(n, sizeof(*tasks));

	*out = tasks;
	if (!tasks)
		return -1;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		/* strsep, not strtok_r: a field may be empty (no NUMA node: "0\t0-3\t\tOMP_...") and
		 * strtok_r would merge the tabs around it and shift every field after it */
		char *fields = line, *rank = strsep(&fields, "\t");
		struct nm_task *t;
		unsigned long cpus[CPU_SETSIZE / NM_ULONG_BITS] = {0};
		if (k >= n || !rank || atoi(rank) != k)
			return -1;
		t = &tasks[k];
		t->cpus_text = strsep(&fields, "\t");
		t->mems_text = strsep(&fields, "\t");
		if (!t->cpus_text || !t->mems_text || parse_list(t->cpus_text, cpus, CPU_SETSIZE) < 0)
			return -1;
		CPU_ZERO(&t->cpus);
		for (int c = 0; c < CPU_SETSIZE; c++)
			if (cpus[c / NM_ULONG_BITS] >> (c % NM_ULONG_BITS) & 1)
				CPU_SET(c, &t->cpus);
		if (strcmp(t->mems_text, "") && parse_list(t->mems_text, t->mems, NM_MAX_NODES) < 0)
			return -1;
		t->has_mems = t->mems_text[0] != '\0';
		if (!(t->env = calloc(fields_in(fields) + 1, sizeof(char *))))
			return -1;
		for (char *kv = strsep(&fields, "\t"); kv; kv = strsep(&fields, "\t"))
			if (strchr(kv, '='))
				t->env[t->nenv++] = kv;
		k++;
	}
	return k == n ? 0 : -1;
}

static void free_tasks(struct nm_task *tasks, int n)
{
	for (int i = 0; tasks && i < n; i++)
		free(tasks[i].env);
	free(tasks);
}

/* env with NM_CACHE_KEY_VAR=key (the planner caches what it prints under it), or NULL. */
static char **with_key(char **env, const struct nm_text *key)
{
	size_t n = 0, k = 0;
	char **out;

	while (env[n])
		n++;
	if (!(out = calloc(n + 2, sizeof(char *))))
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(env[i], NM_CACHE_KEY_VAR "=", strlen(NM_CACHE_KEY_VAR) + 1))
			out[k++] = env[i];
	if (asprintf(&out[k], "%s=%s", NM_CACHE_KEY_VAR, key->p) < 0) {
		free(out);
		return NULL;
	}
	return out;
}

int nm_plan(char **argv, char **env, int n, int use_cache, struct nm_task **tasks, int *cached, char *why,
	    size_t whylen)
{
	struct nm_text key = {0};
	char err[400], *out = NULL, **run_env = env, *saved;
	int rc;

	*cached = 0;
	*tasks = NULL;
	if (use_cache && nm_cache_key(argv, env, &key) == 0) {
		if ((out = nm_cache_load(env, &key)) && nm_parse_plan(out, n, tasks) == 0) {
			*cached = 1;
			free(key.p);
			return 0;  /* out stays: the tasks point into it */
		}
		free_tasks(*tasks, n);
		*tasks = NULL;
		free(out);
		run_env = with_key(env, &key);
		if (!run_env)
			run_env = env;
	}
	rc = nm_run(argv, run_env, &out, err, sizeof(err));
	if (run_env != env) {
		for (char **e = run_env; *e; e++)
			if (!strncmp(*e, NM_CACHE_KEY_VAR "=", strlen(NM_CACHE_KEY_VAR) + 1))
				free(*e);  /* ours: the others are env's */
		free(run_env);
	}
	if (rc < 0) {
		snprintf(why, whylen, "`nodemap plan` failed: %s", err[0] ? err : "no message");
		free(out);
		free(key.p);
		return -1;
	}
	/* the cache holds only what was applied: a wrapper in place of nodemap that changed its
	 * output leaves an entry of other text, which is removed */
	if (key.p && (saved = nm_cache_load(env, &key))) {
		if (strcmp(saved, out))
			nm_cache_drop(env, &key);
		free(saved);
	}
	free(key.p);
	if (nm_parse_plan(out, n, tasks) < 0) {
		free_tasks(*tasks, n);
		*tasks = NULL;
		free(out);
		snprintf(why, whylen, "`nodemap plan --emit tasks` gave a plan this plugin cannot read (versions differ?)");
		return -1;
	}
	return 0;
}

/* --- applying it, in each task ----------------------------------------------------- */

static int visibility(const char *kv)
{
	static const char *names[] = {"CUDA_VISIBLE_DEVICES=", "CUDA_DEVICE_ORDER=", "ROCR_VISIBLE_DEVICES=",
				      "ZE_AFFINITY_MASK=", "ZE_ENABLE_PCI_ID_DEVICE_ORDER=", NULL};
	for (int i = 0; names[i]; i++)
		if (!strncmp(kv, names[i], strlen(names[i])))
			return 1;
	return 0;
}

int nm_apply_task(struct nm_task *t, int id, nm_setenv_fn set, void *ctx, int verbose)
{
	if (sched_setaffinity(0, sizeof(t->cpus), &t->cpus) < 0) {
		fprintf(stderr, "nodemap: task %d: cannot bind to PUs %s (%s); it runs with Slurm's binding\n", id,
			t->cpus_text, strerror(errno));
		return -1;
	}
	if (t->has_mems && syscall(SYS_set_mempolicy, MPOL_BIND_MODE, t->mems, (unsigned long)NM_MAX_NODES + 1) < 0)
		fprintf(stderr, "nodemap: task %d: memory policy bind:%s refused (%s); memory follows first touch\n", id,
			t->mems_text, strerror(errno));
	for (int i = 0; i < t->nenv; i++) {
		/* the job's own values win, but device visibility narrows to the plan's GPUs (as `nodemap run`) */
		int overwrite = visibility(t->env[i]);
		char *eq = strchr(t->env[i], '=');
		*eq = '\0';
		set(ctx, t->env[i], eq + 1, overwrite);
		*eq = '=';
	}
	if (verbose)
		fprintf(stderr, "nodemap: task %d: PUs %s, memory bind:%s, %d variables\n", id, t->cpus_text,
			t->mems_text[0] ? t->mems_text : "-", t->nenv);
	return 0;
}
