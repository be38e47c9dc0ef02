/*
 * The plugin's work without Slurm: read --nodemap options, build and run
 * `nodemap plan --emit tasks`, read its task lines and apply one task's
 * binding (CPU affinity, memory policy, environment) to the calling process.
 * nodemap_spank.c calls these from slurmstepd; apply_driver.c calls the same
 * ones on a machine without Slurm (the GPU check), so both apply one code.
 */
#ifndef NODEMAP_APPLY_H
#define NODEMAP_APPLY_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE  /* cpu_set_t */
#endif
#include <sched.h>
#include <stddef.h>

/* hidden: the plugin lives inside slurmstepd, whose symbols these must not meet */
#define NM_HIDDEN __attribute__((visibility("hidden")))

#define NM_MAX_NODES 1024  /* NUMA nodes in a memory mask */
#define NM_ULONG_BITS (8 * sizeof(unsigned long))
#define NM_PLAN_ARGS 64    /* argv entries of `nodemap plan`, NULL included */
#define NM_MAX_OPTARG 511  /* characters of --nodemap=OPTS */
#define NM_MAX_COUNT (1 << 20)  /* threads, SMT, GPUs per task: nodemap's cliargs.MAX_COUNT */
#define NM_MAX_PLAN (8 << 20)   /* bytes of a plan: 16,384 tasks are a few MB; a larger one is refused */
#define NM_OPTIONS_HELP \
	"use off, strict, verbose, threads=T, smt=K, gpus-per-task=G, nic-rails=R|all|auto, comma-separated"

/* --nodemap=OPTS as given: enabled -1 (not asked), 0 (off), 1 (on) */
struct nm_options {
	int enabled, strict, verbose;
	char request[128];  /* extra `nodemap plan` options, space-separated: each key once, its last value */
};

/* One line of `nodemap plan --emit tasks`: local rank, PUs, NUMA nodes, NAME=VALUE... */
struct nm_task {
	char *cpus_text, *mems_text;  /* split in place from the plan's text */
	cpu_set_t cpus;
	unsigned long mems[NM_MAX_NODES / NM_ULONG_BITS];
	int has_mems;
	char **env;
	int nenv;
};

/* Sets one variable of the task: setenv(3) in a plain process, spank_setenv in Slurm. */
typedef int (*nm_setenv_fn)(void *ctx, const char *name, const char *value, int overwrite);

/* 0, or -1 with one line in why: the option as given and what is wrong with it (the values are
 * checked here, at srun's option time, with the limits `nodemap plan` has) */
NM_HIDDEN int nm_parse_options(const char *optarg, struct nm_options *o, char *why, size_t whylen);
/* The nodemap executable: `configured` if given, else the first `nodemap` in path (changed in place). */
NM_HIDDEN int nm_find_nodemap(const char *configured, char *path, char *out, size_t len);
/* argv (NM_PLAN_ARGS entries) of `nodemap plan` for n tasks within Slurm's cores (NULL: all);
 * count holds the number (16 chars); request is split in place. */
NM_HIDDEN void nm_plan_argv(char **argv, char *exe, char *count, unsigned n, char *cores, char *request);
/* Run argv with env, as the caller's effective user only (a real or saved root id is dropped in the
 * child): its stdout in *out, the last line of its stderr in err (where an error is said, after any
 * usage lines); 0 when it exits 0. Output over NM_MAX_PLAN is refused, never cut. */
NM_HIDDEN int nm_run(char **argv, char **env, char **out, char *err, size_t errlen);
/* The n task lines of text (split in place) into *tasks; -1 on a plan this code cannot read. */
NM_HIDDEN int nm_parse_plan(char *text, int n, struct nm_task **tasks);
/* The node's plan of n tasks for `nodemap plan` argv run with env: read from the plan cache
 * (cache.h) when it holds one for exactly this command line, environment and node, else made by
 * running argv (which caches it). 0 with the tasks and *cached; -1 with one line in why. */
NM_HIDDEN int nm_plan(char **argv, char **env, int n, int use_cache, struct nm_task **tasks, int *cached, char *why,
		      size_t whylen);
/* Bind the calling process as task id: 0, or -1 when the CPU affinity is refused (said on stderr;
 * nothing else is then applied). A refused memory policy is said and the rest applied. */
NM_HIDDEN int nm_apply_task(struct nm_task *t, int id, nm_setenv_fn set, void *ctx, int verbose);

#endif
