/*
 * nodemap's Slurm SPANK plugin: `srun --nodemap[=OPTIONS] app` binds every
 * task by nodemap's plan without a wrapper per rank.
 *
 * Once per node and step (slurm_spank_user_init, in slurmstepd), it runs
 * `nodemap plan --tasks N --emit tasks --slurm-cores STEP_CORES [options]`
 * for the node's N tasks within the step's cores, and
 * keeps the plan: one line per task (local rank, PUs, NUMA nodes,
 * NAME=VALUE...). Each task then (slurm_spank_task_init, in the task, after
 * Slurm's own task plugin bound it and before exec) gets the plan's CPU
 * affinity, memory policy (bind) and environment. The plan is the one
 * `nodemap plan` and `nodemap run` make for the same node and task count.
 *
 * Failure is safe: when no plan can be made, local task 0 prints one line on
 * stderr and every task runs with Slurm's binding, unless --nodemap=strict.
 *
 * plugstack.conf:  optional /path/nodemap_spank.so [default_on] [nodemap=/path/to/nodemap]
 *                  (default_on: every step, except one that passes --cpu-bind/--gpu-bind/--tres-bind
 *                  without --nodemap, or --nodemap=off)
 * options:         --nodemap[=off|strict|verbose|threads=T|smt=K|gpus-per-task=G|nic-rails=R,...]
 */

#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(nodemap, 1);

#define MAX_OUTPUT (8 << 20)  /* a plan of 16,384 tasks is a few MB */
#define PLAN_TIMEOUT_S 120
#define MAX_NODES 1024  /* NUMA nodes in a memory mask */
#define MPOL_BIND_MODE 2
#define ULONG_BITS (8 * sizeof(unsigned long))

static int enabled = -1;  /* -1: not asked (plugstack default), 0: off, 1: on */
static int default_on, strict, verbose;
static char request[512];  /* extra `nodemap plan` options, space-separated */
static char nodemap_path[4096];  /* plugstack nodemap=PATH, else found in the job's PATH */

struct task {
	char *line;  /* the plan's line, split in place */
	char *cpus_text, *mems_text;
	cpu_set_t cpus;
	unsigned long mems[MAX_NODES / ULONG_BITS];
	int has_mems;
	char **env;
	int nenv;
};
static struct task *tasks;
static int ntasks;
static char failure[512];  /* why there is no plan; "" when there is one */

/* --- options ----------------------------------------------------------------------- */

static int add_request(const char *flag, const char *value)
{
	for (const char *c = value; *c; c++)
		if (!isalnum((unsigned char)*c))
			return -1;  /* counts and words only: nothing to quote */
	size_t used = strlen(request);
	int n = snprintf(request + used, sizeof(request) - used, "%s %s ", flag, value);
	return (n < 0 || (size_t)n >= sizeof(request) - used) ? -1 : 0;
}

static int parse_options(const char *optarg)
{
	static const char *keys[][2] = {{"threads=", "--threads"}, {"smt=", "--smt"},
					{"gpus-per-task=", "--gpus-per-task"}, {"nic-rails=", "--nic-rails"}};
	char buf[512], *save = NULL;

	enabled = 1;
	request[0] = '\0';
	if (!optarg || !*optarg)
		return 0;
	if (strlen(optarg) >= sizeof(buf))
		return -1;
	strcpy(buf, optarg);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t k, nkeys = sizeof(keys) / sizeof(keys[0]);
		if (!strcmp(tok, "off")) {
			enabled = 0;
			continue;
		}
		if (!strcmp(tok, "on"))
			continue;
		if (!strcmp(tok, "strict")) {
			strict = 1;
			continue;
		}
		if (!strcmp(tok, "verbose")) {
			verbose = 1;
			continue;
		}
		for (k = 0; k < nkeys; k++)
			if (!strncmp(tok, keys[k][0], strlen(keys[k][0])))
				break;
		if (k == nkeys || add_request(keys[k][1], tok + strlen(keys[k][0])) < 0) {
			slurm_error("nodemap: --nodemap=%s: '%s' is not an option (use off, strict, verbose, threads=T, "
				    "smt=K, gpus-per-task=G, nic-rails=R|all|auto, comma-separated)", optarg, tok);
			return -1;
		}
	}
	return 0;
}

static int option_cb(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	return parse_options(optarg);
}

static struct spank_option nodemap_option = {
	"nodemap", "[OPTS]",
	"bind each task (CPUs, memory, GPUs, NICs, OpenMP) by nodemap's plan for this node; OPTS: off, strict, "
	"verbose, threads=T, smt=K, gpus-per-task=G, nic-rails=R",
	2, 0, option_cb};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		if (!strcmp(av[i], "default_on"))
			default_on = 1;
		else if (!strcmp(av[i], "default_off"))
			default_on = 0;
		else if (!strncmp(av[i], "nodemap=", 8) && strlen(av[i] + 8) < sizeof(nodemap_path))
			strcpy(nodemap_path, av[i] + 8);
		else
			slurm_error("nodemap: plugstack argument '%s' is unknown (default_on, default_off, nodemap=PATH)",
				    av[i]);
	}
	return spank_option_register(sp, &nodemap_option) == ESPANK_SUCCESS ? 0 : -1;
}

static int active(void)
{
	return enabled == 1 || (enabled == -1 && default_on);
}

#define ASIDE_VAR "SLURM_NODEMAP_ASIDE"  /* srun -> the step: the job binds itself */

/* Under default_on, a step that asks for its own binding (srun --cpu-bind or
 * --gpu-bind, and no --nodemap) keeps Slurm's, as mpibind's plugin does. Only
 * srun's command line says what the user asked (the task environment holds
 * Slurm's resolved binding either way); the answer travels in srun's
 * environment, which the step inherits. */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	char args[65536];
	ssize_t n = 0, r;
	FILE *f;

	(void)sp;
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_LOCAL || enabled != -1 || !default_on)
		return 0;
	f = fopen("/proc/self/cmdline", "r");
	if (!f)
		return 0;
	while (n < (ssize_t)sizeof(args) - 1 && (r = fread(args + n, 1, sizeof(args) - 1 - n, f)) > 0)
		n += r;
	fclose(f);
	args[n] = '\0';
	for (char *a = args; a < args + n; a += strlen(a) + 1) {
		if (!strcmp(a, "--"))
			break;
		if (!strncmp(a, "--cpu-bind", 10) || !strncmp(a, "--cpu_bind", 10) || !strncmp(a, "--gpu-bind", 10) ||
		    !strncmp(a, "--gpu_bind", 10) || !strncmp(a, "--tres-bind", 11)) {
			setenv(ASIDE_VAR, a, 1);
			break;
		}
	}
	return 0;
}

/* In the step: whether srun said the job binds itself. */
static int set_aside(spank_t sp)
{
	char why[256];
	return enabled == -1 && spank_getenv(sp, ASIDE_VAR, why, sizeof(why)) == ESPANK_SUCCESS;
}

/* --- planning, once per node --------------------------------------------------------- */

static void fail(const char *fmt, const char *detail)
{
	snprintf(failure, sizeof(failure), fmt, detail);
}

/* No plan: with --nodemap=strict the step fails (the reason in slurmd's log
 * and on the job's stderr); otherwise task 0 says why and tasks run as Slurm bound them. */
static int refuse(void)
{
	if (!strict)
		return 0;
	slurm_error("nodemap: %s; --nodemap=strict: the step does not start", failure);
	return -1;
}

/* The nodemap executable: the plugstack's path, else the first in the job's PATH. */
static int find_nodemap(spank_t sp, char *out, size_t len)
{
	char path[8192], *save = NULL;

	if (nodemap_path[0]) {
		snprintf(out, len, "%s", nodemap_path);
		return access(out, X_OK);
	}
	if (spank_getenv(sp, "PATH", path, sizeof(path)) != ESPANK_SUCCESS)
		return -1;
	for (char *dir = strtok_r(path, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(out, len, "%s/nodemap", *dir ? dir : ".");
		if (!access(out, X_OK))
			return 0;
	}
	return -1;
}

/* This process's environment with the job's PATH and GPU visibility: the plan
 * is made within the GPUs the job sees. Built before fork (the child only execs). */
static char **child_env(spank_t sp)
{
	static const char *from_job[] = {"PATH", "HOME", "TMPDIR", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
					 "ZE_AFFINITY_MASK", "NODEMAP_CACHE_DIR", NULL};
	extern char **environ;
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 8, sizeof(char *));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		int mine = 0;
		for (int j = 0; from_job[j]; j++)
			if (!strncmp(environ[i], from_job[j], strlen(from_job[j])) && environ[i][strlen(from_job[j])] == '=')
				mine = 1;
		if (!mine)
			env[k++] = environ[i];
	}
	for (int j = 0; from_job[j]; j++) {
		char value[8192];
		if (spank_getenv(sp, from_job[j], value, sizeof(value)) == ESPANK_SUCCESS &&
		    asprintf(&env[k], "%s=%s", from_job[j], value) >= 0)
			k++;
	}
	env[k] = NULL;
	return env;
}

/* Run argv with env; its stdout in *out (NUL-terminated), the first line of its stderr in err. */
static int run(char **argv, char **env, char **out, char *err, size_t errlen)
{
	int po[2], pe[2], status = 0;
	size_t used = 0, eused = 0, cap = 65536;
	char *buf = malloc(cap);
	time_t deadline = time(NULL) + PLAN_TIMEOUT_S;
	pid_t pid;

	err[0] = '\0';
	if (!buf || pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC)) {
		free(buf);
		snprintf(err, errlen, "cannot make a pipe (%s)", strerror(errno));
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
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	buf[used] = '\0';
	*out = buf;
	char *nl = strchr(err, '\n');
	if (nl)
		*nl = '\0';
	if (open_fds) {
		snprintf(err, errlen, "`nodemap plan` took more than %d s", PLAN_TIMEOUT_S);
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
			bits[i / ULONG_BITS] |= 1UL << (i % ULONG_BITS);
		if (*end == ',')
			end++;
		else if (*end)
			return -1;
		p = end;
	}
	return 0;
}

static int parse_plan(char *text, int n)
{
	char *save = NULL;
	int k = 0;

	tasks = calloc(n, sizeof(*tasks));
	if (!tasks)
		return -1;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *fsave = NULL, *rank = strtok_r(line, "\t", &fsave);
		struct task *t;
		unsigned long cpus[CPU_SETSIZE / ULONG_BITS] = {0};
		if (k >= n || !rank || atoi(rank) != k)
			return -1;
		t = &tasks[k];
		t->cpus_text = strtok_r(NULL, "\t", &fsave);
		t->mems_text = strtok_r(NULL, "\t", &fsave);
		if (!t->cpus_text || !t->mems_text || parse_list(t->cpus_text, cpus, CPU_SETSIZE) < 0)
			return -1;
		CPU_ZERO(&t->cpus);
		for (int c = 0; c < CPU_SETSIZE; c++)
			if (cpus[c / ULONG_BITS] >> (c % ULONG_BITS) & 1)
				CPU_SET(c, &t->cpus);
		if (strcmp(t->mems_text, "") && parse_list(t->mems_text, t->mems, MAX_NODES) < 0)
			return -1;
		t->has_mems = t->mems_text[0] != '\0';
		t->env = calloc(256, sizeof(char *));
		for (char *kv = strtok_r(NULL, "\t", &fsave); kv && t->env && t->nenv < 256; kv = strtok_r(NULL, "\t", &fsave))
			if (strchr(kv, '='))
				t->env[t->nenv++] = kv;
		k++;
	}
	return k == n ? 0 : -1;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	char exe[4096], err[400], count[16], *out = NULL, **env;
	/* Slurm chose the task count: more tasks than PUs share them (as `nodemap run` under a launcher) */
	char *argv[64] = {exe, "plan", "--tasks", count, "--emit", "tasks", "--oversubscribe"}, *cores = NULL;
	int argc = 7;
	uint32_t n = 0;
	char *save = NULL;

	(void)ac;
	(void)av;
	if (!spank_remote(sp) || !active())
		return 0;
	if (set_aside(sp)) {
		enabled = 0;  /* task_init then leaves the tasks alone */
		return 0;
	}
	if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &n) != ESPANK_SUCCESS || n == 0) {
		fail("%s", "Slurm gave no local task count");
		return refuse();
	}
	if (find_nodemap(sp, exe, sizeof(exe)) < 0) {
		fail("cannot run nodemap (%.200s): install it or name it in plugstack.conf (nodemap=PATH)",
		     nodemap_path[0] ? nodemap_path : "not found in the job's PATH");
		return refuse();
	}
	snprintf(count, sizeof(count), "%u", n);
	/* plan within the step's cores (Slurm's logical core numbers, as hwloc's) */
	if (spank_get_item(sp, S_STEP_ALLOC_CORES, &cores) == ESPANK_SUCCESS && cores && *cores) {
		argv[argc++] = "--slurm-cores";
		argv[argc++] = cores;
	}
	for (char *w = strtok_r(request, " ", &save); w && argc < 62; w = strtok_r(NULL, " ", &save))
		argv[argc++] = w;
	argv[argc] = NULL;
	env = child_env(sp);
	if (!env || run(argv, env, &out, err, sizeof(err)) < 0) {
		fail("`nodemap plan` failed: %.400s", err[0] ? err : "no message");
	} else if (parse_plan(out, (int)n) < 0) {
		fail("%s", "`nodemap plan --emit tasks` gave a plan this plugin cannot read (versions differ?)");
	} else {
		ntasks = (int)n;
		return 0;
	}
	return refuse();
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

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	int id = -1;
	struct task *t;

	(void)ac;
	(void)av;
	if (!spank_remote(sp) || !active())
		return 0;
	if (spank_get_item(sp, S_TASK_ID, &id) != ESPANK_SUCCESS || id < 0)
		return 0;
	if (!ntasks || id >= ntasks) {
		if (id == 0)  /* one line per node */
			fprintf(stderr, "nodemap: %s; %s\n", failure[0] ? failure : "no plan for this task",
				strict ? "--nodemap=strict: the task does not start" : "the task runs with Slurm's binding");
		return strict ? -1 : 0;
	}
	t = &tasks[id];
	if (sched_setaffinity(0, sizeof(t->cpus), &t->cpus) < 0) {
		fprintf(stderr, "nodemap: task %d: cannot bind to PUs %s (%s); it runs with Slurm's binding\n", id,
			t->cpus_text, strerror(errno));
		return strict ? -1 : 0;
	}
	if (t->has_mems && syscall(SYS_set_mempolicy, MPOL_BIND_MODE, t->mems, (unsigned long)MAX_NODES + 1) < 0)
		fprintf(stderr, "nodemap: task %d: memory policy bind:%s refused (%s); memory follows first touch\n", id,
			t->mems_text, strerror(errno));
	for (int i = 0; i < t->nenv; i++) {
		/* the job's own values win, but device visibility narrows to the plan's GPUs (as `nodemap run`) */
		int overwrite = visibility(t->env[i]);
		char *eq = strchr(t->env[i], '=');
		*eq = '\0';
		spank_setenv(sp, t->env[i], eq + 1, overwrite);
		*eq = '=';
	}
	if (verbose)
		fprintf(stderr, "nodemap: task %d: PUs %s, memory bind:%s, %d variables\n", id, t->cpus_text,
			t->mems_text[0] ? t->mems_text : "-", t->nenv);
	return 0;
}
