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
#define NM_OPTIONS_HELP \
	"use off, strict, verbose, threads=T, smt=K, gpus-per-task=G, nic-rails=R|all|auto, comma-separated"

/* --nodemap=OPTS as given: enabled -1 (not asked), 0 (off), 1 (on) */
struct nm_options {
	int enabled, strict, verbose;
	char request[512];  /* extra `nodemap plan` options, space-separated */
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

/* 0, or -1 with the token that is not an option in bad */
NM_HIDDEN int nm_parse_options(const char *optarg, struct nm_options *o, char *bad, size_t badlen);
/* The nodemap executable: `configured` if given, else the first `nodemap` in path (changed in place). */
NM_HIDDEN int nm_find_nodemap(const char *configured, char *path, char *out, size_t len);
/* argv (NM_PLAN_ARGS entries) of `nodemap plan` for n tasks within Slurm's cores (NULL: all);
 * count holds the number (16 chars); request is split in place. */
NM_HIDDEN void nm_plan_argv(char **argv, char *exe, char *count, unsigned n, char *cores, char *request);
/* Run argv with env: its stdout in *out, the first line of its stderr in err; 0 when it exits 0. */
NM_HIDDEN int nm_run(char **argv, char **env, char **out, char *err, size_t errlen);
/* The n task lines of text (split in place) into *tasks; -1 on a plan this code cannot read. */
NM_HIDDEN int nm_parse_plan(char *text, int n, struct nm_task **tasks);
/* Bind the calling process as task id: 0, or -1 when the CPU affinity is refused (said on stderr;
 * nothing else is then applied). A refused memory policy is said and the rest applied. */
NM_HIDDEN int nm_apply_task(struct nm_task *t, int id, nm_setenv_fn set, void *ctx, int verbose);

#endif
