/* The plugin's planning and per-task binding without spank.h (apply.h says why). */

#include "apply.h"

#include <ctype.h>
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

#define MAX_OUTPUT (8 << 20)  /* a plan of 16,384 tasks is a few MB */
#define PLAN_TIMEOUT_S 120
#define MPOL_BIND_MODE 2

/* --- options ----------------------------------------------------------------------- */

static int add_request(char *request, size_t len, const char *flag, const char *value)
{
	for (const char *c = value; *c; c++)
		if (!isalnum((unsigned char)*c))
			return -1;  /* counts and words only: nothing to quote */
	size_t used = strlen(request);
	int n = snprintf(request + used, len - used, "%s %s ", flag, value);
	return (n < 0 || (size_t)n >= len - used) ? -1 : 0;
}

int nm_parse_options(const char *optarg, struct nm_options *o, char *bad, size_t badlen)
{
	static const char *keys[][2] = {{"threads=", "--threads"}, {"smt=", "--smt"},
					{"gpus-per-task=", "--gpus-per-task"}, {"nic-rails=", "--nic-rails"}};
	char buf[512], *save = NULL;

	o->enabled = 1;
	o->request[0] = '\0';
	bad[0] = '\0';
	if (!optarg || !*optarg)
		return 0;
	if (strlen(optarg) >= sizeof(buf))
		return -1;
	strcpy(buf, optarg);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t k, nkeys = sizeof(keys) / sizeof(keys[0]);
		if (!strcmp(tok, "off")) {
			o->enabled = 0;
			continue;
		}
		if (!strcmp(tok, "on"))
			continue;
		if (!strcmp(tok, "strict")) {
			o->strict = 1;
			continue;
		}
		if (!strcmp(tok, "verbose")) {
			o->verbose = 1;
			continue;
		}
		for (k = 0; k < nkeys; k++)
			if (!strncmp(tok, keys[k][0], strlen(keys[k][0])))
				break;
		if (k == nkeys || add_request(o->request, sizeof(o->request), keys[k][1], tok + strlen(keys[k][0])) < 0) {
			snprintf(bad, badlen, "%s", tok);
			return -1;
		}
	}
	return 0;
}

/* --- planning ---------------------------------------------------------------------- */

int nm_find_nodemap(const char *configured, char *path, char *out, size_t len)
{
	char *save = NULL;

	if (configured && *configured) {
		snprintf(out, len, "%s", configured);
		return access(out, X_OK);
	}
	if (!path)
		return -1;
	for (char *dir = strtok_r(path, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(out, len, "%s/nodemap", *dir ? dir : ".");
		if (!access(out, X_OK))
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

int nm_run(char **argv, char **env, char **out, char *err, size_t errlen)
{
	int po[2], pe[2], status = 0;
	size_t used = 0, eused = 0, cap = 65536;
	char *buf = malloc(cap);
	time_t deadline = time(NULL) + PLAN_TIMEOUT_S;
	pid_t pid;

	err[0] = '\0';
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
				if (used + r + 1 > MAX_OUTPUT)
					continue;  /* keep draining; the plan is refused below */
				if (used + r + 1 > cap) {
					char *more = realloc(buf, cap = 2 * (used + r + 1));
					if (!more)
						continue;
					buf = more;
				}
				memcpy(buf + used, tmp, r);
				used += r;
			} else if (eused + 1 < errlen) {
				size_t take = (size_t)r < errlen - 1 - eused ? (size_t)r : errlen - 1 - eused;
				memcpy(err + eused, tmp, take);
				eused += take;
				err[eused] = '\0';
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
	char *nl = strchr(err, '\n');
	if (nl)
		*nl = '\0';
	if (open_fds) {
		snprintf(err, errlen, "`nodemap plan` took more than %d s", PLAN_TIMEOUT_S);
		return -1;
	}
	if (waited < 0) {  /* ECHILD (SIGCHLD ignored: reaped unseen): how it ended is unknown, not a success */
		snprintf(err, errlen, "cannot tell how `nodemap plan` ended (waitpid: %s)", strerror(wait_errno));
		return -1;
	}
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
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
		t->env = calloc(256, sizeof(char *));
		for (char *kv = strsep(&fields, "\t"); kv && t->env && t->nenv < 256; kv = strsep(&fields, "\t"))
			if (strchr(kv, '='))
				t->env[t->nenv++] = kv;
		k++;
	}
	return k == n ? 0 : -1;
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
