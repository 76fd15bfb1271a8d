/* Kernel profiles: what posd has learnt of each kernel from its completions, per user, kernel
 * key and launch shape. A profile holds the kernel's solo duration (a running mean with its
 * spread and count, from samples taken while no other client had work on the device), its
 * measured slowdown when it ran beside other clients' work (the mean ratio of such samples to
 * the solo mean), and how many completions were looked at. The SM demand and the compute or
 * memory leaning are derived from the shape, the device and the co-run ratio (pos_kprof_*).
 *
 * Profiles are keyed by user as well: a client can only shape the profiles of its own user's
 * kernels, so what one user's processes report of themselves never changes how another
 * user's work is predicted (docs/policy.md, "Kernel profiles").
 *
 * The table is pure data (no I/O but load and save); the core feeds it, policies read it, and
 * posd and possim persist and import it in the text format of docs/policy.md. */
#ifndef POS_SCHED_PROFILE_H
#define POS_SCHED_PROFILE_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "sched/policy/policy.h"

#define POS_PROF_VERSION 1
#define POS_PROF_ANY_UID UINT32_MAX /* an imported profile that applies to every user */
#define POS_PROF_MEAN_EXACT 1024   /* samples averaged exactly; later ones move a mean by 1/this */

struct pos_kprof {
    uint64_t key;
    uint32_t uid;
    uint32_t used;
    uint32_t grid[3], block[3];
    uint64_t n;      /* solo samples */
    double mean_ns;  /* their running mean */
    double m2;       /* their sum of squared deviations (Welford), for the spread */
    uint64_t tries;  /* exact completions looked at, samples or not */
    uint64_t co_n;   /* samples taken while other clients had work in flight */
    uint64_t launches; /* submissions seen (not kept in the file) */
    double co_ratio; /* their mean ratio to the solo mean (1 = no slowdown) */
};

struct pos_profiles {
    struct pos_kprof *t;
    size_t cap;   /* power of two */
    size_t count; /* profiles in use */
    size_t max;   /* most profiles kept; further shapes are not learnt (counted in dropped) */
    uint64_t dropped;
    uint64_t rejected; /* samples thrown away as outliers */
    /* most profiles one user's kernels may take (0: no cap; imported profiles for every user
     * are not counted): one user cannot crowd out everyone's. Further shapes of that user are
     * not learnt, counted in user_refused */
    size_t user_max;
    uint64_t user_refused;
    struct pos_prof_user {
        uint32_t uid, used;
        size_t n;
    } *users; /* open addressing, users_cap a power of two (or 0) */
    size_t users_cap, nusers;
};

/* An empty table that keeps at most MAX profiles (0: 1 << 20). Returns 0 or -ENOMEM. */
int pos_prof_init(struct pos_profiles *p, size_t max);
void pos_prof_free(struct pos_profiles *p);
void pos_prof_reset(struct pos_profiles *p);

/* The profile of (UID, KEY, GRID, BLOCK); with CREATE, a new empty one when there is none (NULL
 * when the table is full or out of memory). Without CREATE, an imported any-user profile
 * answers when UID has none of its own. */
/* The profile of UID's kernel KEY launched as GRID x BLOCK; with CREATE, a new one when there
 * is none and the table (max) and the user (user_max) have room, else NULL (counted in
 * dropped, or user_refused). */
struct pos_kprof *pos_prof_get(struct pos_profiles *p, uint32_t uid, uint64_t key,
                               const uint32_t grid[3], const uint32_t block[3], int create);

/* How many profiles UID's kernels hold. */
size_t pos_prof_user_count(const struct pos_profiles *p, uint32_t uid);
const struct pos_kprof *pos_prof_find(const struct pos_profiles *p, uint32_t uid, uint64_t key,
                                      const uint32_t grid[3], const uint32_t block[3]);

/* One solo duration sample of NS. Samples far beyond what is known (more than 4 x the mean
 * once 16 are in: an idle gap or a preemption, not the kernel) are rejected; returns 1 when
 * the sample was taken. The mean is exact up to 1024 samples, then moves by 1/1024. */
int pos_prof_add_solo(struct pos_profiles *p, struct pos_kprof *k, double ns);
/* One sample of NS taken while other work ran beside it (needs a solo mean). */
void pos_prof_add_corun(struct pos_kprof *k, double ns);

double pos_kprof_sd(const struct pos_kprof *k);

/* The share of DEV's SMs the kernel's blocks occupy at once (0..1; 0 when DEV is unknown). */
double pos_kprof_sm_demand(const struct pos_sched_device *dev, const uint32_t grid[3],
                           const uint32_t block[3], uint32_t smem);

/* Writes P (measured on DEV) to F in the profile file's format: the profiles that have
 * samples. Returns how many it wrote, or -EIO when F reported an error. */
int pos_prof_write(const struct pos_profiles *p, const struct pos_sched_device *dev, FILE *f);

/* Writes P to PATH atomically (a temporary file renamed over it), for device DEV, as a user
 * writes to a path of their own (possim; posd writes in its state directory, sched/files.h).
 * Returns how many it wrote, or a negative errno with what failed in ERR. */
int pos_prof_save(const struct pos_profiles *p, const struct pos_sched_device *dev,
                  const char *path, char *err, size_t errlen);

/* Merges the profiles of PATH into P: a profile of the file replaces P's for the same user,
 * key and shape. A file measured on another device (its SM count differs from DEV's, when
 * both are known), truncated, of another version or with impossible values is refused whole
 * with "FILE:LINE: what" in ERR (-EINVAL; -errno when it cannot be read); P is then
 * untouched. */
int pos_prof_load(struct pos_profiles *p, const struct pos_sched_device *dev, const char *path,
                  char *err, size_t errlen);
/* The same from an open file F, named NAME in messages (F stays open). */
int pos_prof_load_file(struct pos_profiles *p, const struct pos_sched_device *dev, FILE *f,
                       const char *name, char *err, size_t errlen);

#endif
