/*
 * nodemap_apply: the SPANK plugin's planning and per-task binding without
 * Slurm, for machines that have none (the GPU check, benchmarks/spank_apply_gpu.py).
 *
 *   nodemap_apply [--nodemap=OPTS] [--nodemap-path=PATH] [--cores=LIST] [--no-cache] NTASKS [--] CMD [ARG...]
 *
 * Like the plugin on one node: the plan of `nodemap plan --tasks NTASKS
 * --emit tasks` (the same command line, OPTS as srun's --nodemap=OPTS, LIST
 * as Slurm's step cores; from the node's plan cache when it holds it, as the
 * plugin takes it: cache.h), then NTASKS children at once, each bound as its task (the
 * same apply.c code the plugin runs in the task) and exec'ing CMD with
 * NODEMAP_APPLY_TASK=<its local rank>. No plan: one line on stderr and the
 * children run unbound (with strict: nothing runs, exit 1). Exit status: 0
 * when every child exits 0, else the first failure's (128+signal if killed).
 */

#include "apply.h"
#include "cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int usage(const char *why)
{
	fprintf(stderr, "nodemap_apply: %s\nusage: nodemap_apply [--nodemap=OPTS] [--nodemap-path=PATH] "
			"[--cores=LIST] [--no-cache] NTASKS [--] CMD [ARG...]\n", why);
	return 2;
}

static int set_here(void *ctx, const char *name, const char *value, int overwrite)
{
	(void)ctx;
	return setenv(name, value, overwrite);
}

/* The plan of n tasks into *tasks (*cached: read from the plan cache); 0, or -1 with the reason in why. */
static int plan(struct nm_options *o, const char *configured, char *cores, int use_cache, unsigned n,
		struct nm_task **tasks, int *cached, char *why, size_t len)
{
	char exe[4096], count[16], *argv[NM_PLAN_ARGS];
	char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;

	if (nm_find_nodemap(configured, path, exe, sizeof(exe)) < 0) {
		snprintf(why, len, "cannot run nodemap (%.200s): install it or pass --nodemap-path=PATH",
			 configured ? configured : "not found in PATH");
		free(path);
		return -1;
	}
	free(path);
	nm_plan_argv(argv, exe, count, n, cores, o->request);
	return nm_plan(argv, environ, (int)n, use_cache, tasks, cached, why, len);
}

int main(int argc, char **argv)
{
	struct nm_options o = {.enabled = -1};
	struct nm_task *tasks = NULL;
	char *configured = NULL, *cores = NULL, why[768], *end;
	int a = 1, planned, status, result = 0, use_cache = 1, cached = 0;
	long n;

	for (; a < argc && !strncmp(argv[a], "--", 2) && strcmp(argv[a], "--"); a++) {
		if (!strncmp(argv[a], "--nodemap=", 10)) {
			if (nm_parse_options(argv[a] + 10, &o, why, sizeof(why)) < 0)
				return usage(why);
		} else if (!strncmp(argv[a], "--nodemap-path=", 15)) {
			configured = argv[a] + 15;
		} else if (!strncmp(argv[a], "--cores=", 8)) {
			cores = argv[a] + 8;
		} else if (!strcmp(argv[a], "--no-cache")) {
			use_cache = 0;
		} else {
			snprintf(why, sizeof(why), "%.200s is not an option", argv[a]);
			return usage(why);
		}
	}
	if (a >= argc || (n = strtol(argv[a], &end, 10)) < 1 || *end || n > 65536)
		return usage("NTASKS: a count of tasks, 1 or more");
	if (++a < argc && !strcmp(argv[a], "--"))
		a++;
	if (a >= argc)
		return usage("no command to run");
	planned = plan(&o, configured, cores, use_cache, (unsigned)n, &tasks, &cached, why, sizeof(why)) == 0;
	if (planned && o.verbose)
		fprintf(stderr, "nodemap: the node's plan: %s\n", cached ? "from its plan cache" : "made by `nodemap plan`");
	if (!planned) {
		fprintf(stderr, "nodemap: %s; %s\n", why,
			o.strict ? "strict: no task starts" : "the tasks run unbound");
		if (o.strict)
			return 1;
	}
	fflush(NULL);
	for (long i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("nodemap_apply: fork");
			return 1;
		}
		if (pid == 0) {
			char id[16];
			snprintf(id, sizeof(id), "%ld", i);
			setenv("NODEMAP_APPLY_TASK", id, 1);
			if (planned && nm_apply_task(&tasks[i], (int)i, set_here, NULL, o.verbose) < 0 && o.strict)
				_exit(1);
			execvp(argv[a], argv + a);
			fprintf(stderr, "nodemap_apply: cannot run %s: %s\n", argv[a], strerror(errno));
			_exit(127);
		}
	}
	while (wait(&status) > 0) {
		int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		if (!result)
			result = code;
	}
	return result;
}
