/*
 * nodemap's Slurm SPANK plugin: `srun --nodemap[=OPTIONS] app` binds every
 * task by nodemap's plan without a wrapper per rank.
 *
 * Once per node and step (slurm_spank_user_init, in slurmstepd), it takes
 * the plan of `nodemap plan --tasks N --emit tasks --slurm-cores STEP_CORES
 * [options]` for the node's N tasks within the step's cores: from the node's
 * plan cache (cache.c, no Python) when it holds the plan of exactly this
 * command line, environment and node state, else by running it: one line
 * per task (local rank, PUs, NUMA nodes, NAME=VALUE...). Each task then
 * (slurm_spank_task_init, in the task, after Slurm's own task plugin bound
 * it and before exec) gets the plan's CPU
 * affinity, memory policy (bind) and environment. The plan is the one
 * `nodemap plan` and `nodemap run` make for the same node and task count.
 *
 * Options, planning and the per-task binding are apply.c's, shared with
 * apply_driver.c, which applies the same plan without Slurm (the GPU check).
 *
 * Failure is safe: when no plan can be made, local task 0 prints one line on
 * stderr and every task runs with Slurm's binding, unless --nodemap=strict.
 *
 * plugstack.conf:  optional /path/nodemap_spank.so [default_on] [no_cache] [nodemap=/path/to/nodemap]
 *                  (default_on: every step, except one that passes --cpu-bind/--gpu-bind/--tres-bind
 *                  (or an abbreviation srun takes as one, or SLURM_CPU_BIND/SLURM_GPU_BIND) without
 *                  --nodemap, or --nodemap=off; only steps srun starts: never the batch script,
 *                  salloc's interactive step or the extern step;
 *                  no_cache: run `nodemap plan` for every step)
 * options:         --nodemap[=off|strict|verbose|threads=T|smt=K|gpus-per-task=G|nic-rails=R,...]
 *                  (checked by srun; --nodemap with a --cpu-bind/--gpu-bind/--tres-bind that binds is
 *                  refused by srun: two bindings asked, one would be dropped without a word)
 */

#define _GNU_SOURCE  /* asprintf */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>  /* SLURM_MAX_NORMAL_STEP_ID */
#include <slurm/spank.h>

#include "apply.h"

SPANK_PLUGIN(nodemap, 1);

static struct nm_options opts = {.enabled = -1};  /* enabled -1: not asked (plugstack default) */
static int default_on, no_cache;
static char nodemap_path[4096];  /* plugstack nodemap=PATH, else found in the job's PATH */

static struct nm_task *tasks;
static int ntasks, cached;
static char failure[512];  /* why there is no plan; "" when there is one */

/* --- options ----------------------------------------------------------------------- */

static int parse_options(const char *optarg)
{
	char why[768];

	if (nm_parse_options(optarg, &opts, why, sizeof(why)) == 0)
		return 0;
	slurm_error("nodemap: %s", why);
	return -1;
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
		else if (!strcmp(av[i], "no_cache"))
			no_cache = 1;
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
	return opts.enabled == 1 || (opts.enabled == -1 && default_on);
}

#define ASIDE_VAR "SLURM_NODEMAP_ASIDE"  /* srun -> the step: the job binds itself */

/* Whether a binding option's value (--cpu-bind, --gpu-bind, --tres-bind=gres/gpu:..., or
 * SLURM_CPU_BIND's) holds a word that asks for something: any word but verbosity (quiet, verbose)
 * and, unless none_counts, none. "none" asks Slurm not to bind, which leaves the binding to
 * nodemap; under default_on it still says that the job sees to its binding itself. */
static int asks_binding(const char *value, int none_counts)
{
	char words[256], *w, *rest = words;

	if (strlen(value) >= sizeof(words))
		return 1;
	strcpy(words, value);
	while ((w = strsep(&rest, ","))) {
		if (!strncmp(w, "gres/gpu:", 9))
			w += 9;
		int verbosity = !*w || !strcmp(w, "quiet") || !strcmp(w, "q") || !strcmp(w, "verbose") || !strcmp(w, "v");
		int none = !strcmp(w, "none") || !strcmp(w, "no");
		if (!verbosity && (none_counts || !none))
			return 1;
	}
	return 0;
}

/* A binding asked through srun's environment (SLURM_CPU_BIND, SLURM_GPU_BIND: srun reads them as
 * --cpu-bind/--gpu-bind; a job script's `export SLURM_CPU_BIND=cores` sets them). */
static const char *bind_in_env(void)
{
	static const char *names[] = {"SLURM_CPU_BIND", "SLURM_GPU_BIND", NULL};

	for (int i = 0; names[i]; i++) {
		const char *v = getenv(names[i]);
		if (v && *v && asks_binding(v, 1))
			return names[i];
	}
	return NULL;
}

extern int optind;  /* libc's getopt index: srun's parsing left it at the application's argv[0] */

/* srun's binding options as getopt_long takes them: the full name or an abbreviation of at least
 * `shortest` characters; a shorter one is a prefix of another option too (--cpu- of --cpu-freq,
 * --gpu- of --gpu-freq, --cpu of --cpus-per-task), which srun refuses as ambiguous. The lengths are
 * those of Slurm 22.05's srun options (src/common/slurm_opt.c); --tres-bind is later Slurm's, beside
 * --tres-per-task. */
static const struct binding_option {
	const char *name;
	size_t shortest;
} binding_options[] = {{"cpu-bind", 5}, {"cpu_bind", 4}, {"gpu-bind", 5}, {"tres-bind", 6}, {NULL, 0}};

/* The binding option that srun takes word ("--NAME" or "--NAME=VALUE") as, or NULL. */
static const char *binding_option(const char *word)
{
	size_t len;

	if (strncmp(word, "--", 2))
		return NULL;
	word += 2;
	len = strcspn(word, "=");
	for (int k = 0; binding_options[k].name; k++)
		if (len >= binding_options[k].shortest && len <= strlen(binding_options[k].name) &&
		    !strncmp(word, binding_options[k].name, len))
			return binding_options[k].name;
	return NULL;
}

/* The first of srun's own binding options (binding_option; VALUE after '=' or as the next word)
 * that asks for something (asks_binding): "--cpu-bind=VALUE" into found, or 0. Only srun's options
 * count: its command line up to the application, whose own arguments are not srun's. */
static int srun_binding(char *found, size_t len, int none_counts)
{
	static char args[65536];
	char *words[4096];
	ssize_t n = 0, r;
	int count = 0, app = optind;
	FILE *f = fopen("/proc/self/cmdline", "r");

	if (!f)
		return 0;
	while (n < (ssize_t)sizeof(args) - 1 && (r = fread(args + n, 1, sizeof(args) - 1 - n, f)) > 0)
		n += r;
	fclose(f);
	args[n] = '\0';
	for (char *a = args; a < args + n && count < 4096; a += strlen(a) + 1)
		words[count++] = a;
	for (int i = 1; i < count; i++) {  /* 0: srun itself */
		const char *name, *value = strchr(words[i], '=');
		if ((app > 0 && i >= app) || !strcmp(words[i], "--"))
			break;  /* the application and its arguments */
		if (!(name = binding_option(words[i])))
			continue;
		if (value)
			value++;
		else if (i + 1 < count)
			value = words[i + 1];
		if (value && asks_binding(value, none_counts)) {
			snprintf(found, len, "--%s=%s", name, value);
			return 1;
		}
	}
	return 0;
}

/* In srun, after its options: --nodemap beside a binding srun was asked for on its command line
 * is refused (the user asked for two bindings; one would be dropped without a word). Under
 * default_on, a step that asks for its own binding (srun --cpu-bind or --gpu-bind, or their
 * SLURM_CPU_BIND/SLURM_GPU_BIND, and no --nodemap) keeps Slurm's, as mpibind's plugin does; the
 * answer travels in srun's environment, which the step inherits. A binding in the environment
 * alone yields to --nodemap given on the command line (Slurm's own order). */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	char option[300];
	const char *env;

	(void)sp;
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_LOCAL || !opts.enabled || (opts.enabled == -1 && !default_on))
		return 0;
	if (opts.enabled == 1) {
		if (!srun_binding(option, sizeof(option), 0))
			return 0;
		slurm_error("nodemap: --nodemap and %.200s both bind the tasks: give one (leave out --nodemap, or "
			    "--nodemap=off, for Slurm's binding; --cpu-bind=none, or no --cpu-bind, for nodemap's)", option);
		return -1;
	}
	if ((env = bind_in_env()))
		setenv(ASIDE_VAR, env, 1);
	else if (srun_binding(option, sizeof(option), 1))
		setenv(ASIDE_VAR, option, 1);
	return 0;
}

/* In the step: whether srun said the job binds itself. */
static int set_aside(spank_t sp)
{
	char why[256];
	return opts.enabled == -1 && spank_getenv(sp, ASIDE_VAR, why, sizeof(why)) == ESPANK_SUCCESS;
}

/* Whether this step is one srun started, the only kind that runs the job's tasks. The batch
 * script, salloc's interactive step and the extern step are none of them, and what they were given
 * reached every srun they start (srun exports their environment: OMP_PLACES and the rest of a
 * one-task plan, into steps that bind themselves too); mpibind's plugin never binds them either. */
static int srun_step(spank_t sp)
{
	uint32_t step;

	return spank_get_item(sp, S_JOB_STEPID, &step) == ESPANK_SUCCESS && step <= SLURM_MAX_NORMAL_STEP_ID;
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
	if (!opts.strict)
		return 0;
	slurm_error("nodemap: %s; --nodemap=strict: the step does not start", failure);
	return -1;
}

/* The nodemap executable: the plugstack's path, else the first in the job's PATH. */
static int find_nodemap(spank_t sp, char *out, size_t len)
{
	char path[8192] = "";

	if (!nodemap_path[0] && spank_getenv(sp, "PATH", path, sizeof(path)) != ESPANK_SUCCESS)
		return -1;
	return nm_find_nodemap(nodemap_path, path, out, len);
}

/* This process's environment with the job's PATH, plan-cache folder and GPU visibility and order
 * (nodemap's env.GPU_VISIBILITY_VARS and GPU_ORDER_VARS): the plan is made within the GPUs the job
 * sees. Built before fork (the child only execs); the plan cache's key holds all of it. */
static char **child_env(spank_t sp)
{
	static const char *from_job[] = {"PATH", "HOME", "TMPDIR", "NODEMAP_CACHE_DIR", "CUDA_VISIBLE_DEVICES",
					 "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
					 "CUDA_DEVICE_ORDER", "ZE_ENABLE_PCI_ID_DEVICE_ORDER", NULL};
	extern char **environ;
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + sizeof(from_job) / sizeof(from_job[0]), sizeof(char *));
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

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	char exe[4096], count[16], **env, *argv[NM_PLAN_ARGS], *cores = NULL;
	uint32_t n = 0;

	(void)ac;
	(void)av;
	if (!spank_remote(sp) || !active())
		return 0;
	if (set_aside(sp) || !srun_step(sp)) {
		opts.enabled = 0;  /* task_init then leaves the tasks alone */
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
	if (spank_get_item(sp, S_STEP_ALLOC_CORES, &cores) != ESPANK_SUCCESS)
		cores = NULL;
	nm_plan_argv(argv, exe, count, n, cores, opts.request);
	if (!(env = child_env(sp))) {
		fail("%s", "no memory for `nodemap plan`'s environment");
		return refuse();
	}
	if (nm_plan(argv, env, (int)n, !no_cache, &tasks, &cached, failure, sizeof(failure)) < 0)
		return refuse();
	ntasks = (int)n;
	return 0;
}

/* --- applying it, in each task ----------------------------------------------------- */

static int set_in_task(void *sp, const char *name, const char *value, int overwrite)
{
	return spank_setenv((spank_t)sp, name, value, overwrite) == ESPANK_SUCCESS ? 0 : -1;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	int id = -1;

	(void)ac;
	(void)av;
	if (!spank_remote(sp) || !active())
		return 0;
	if (spank_get_item(sp, S_TASK_ID, &id) != ESPANK_SUCCESS || id < 0)
		return 0;
	if (!ntasks || id >= ntasks) {
		if (id == 0)  /* one line per node */
			fprintf(stderr, "nodemap: %s; %s\n", failure[0] ? failure : "no plan for this task",
				opts.strict ? "--nodemap=strict: the task does not start" : "the task runs with Slurm's binding");
		return opts.strict ? -1 : 0;
	}
	if (opts.verbose && id == 0)
		fprintf(stderr, "nodemap: the node's plan: %s\n", cached ? "from its plan cache" : "made by `nodemap plan`");
	if (nm_apply_task(&tasks[id], id, set_in_task, sp, opts.verbose) < 0)
		return opts.strict ? -1 : 0;
	return 0;
}
