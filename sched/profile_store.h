/* profile_store.c: the kernel profiles in the state directory */
#ifndef POS_SCHED_PROFILE_STORE_H
#define POS_SCHED_PROFILE_STORE_H

#include "sched/posd.h"

#define POSD_PROFILES_NAME   "profiles"            /* in the state directory */
#define POSD_PROFILE_SAVE_NS (60 * 1000000000ll) /* saver.c's periodic save, this often */
/* At start: STATE_DIR/profiles loaded, and [policy] profiles imported over it (a file
 * refused is logged and left out). */
void posd_profiles_load(struct posd *d);
/* Writes the kernel profiles to STATE_DIR/profiles now (in this thread: saver.c calls it in
 * its child); forgets them all and removes the file.
 * Each returns 0 or a negative errno, with a line for a person in MSG. */
int posd_profiles_write(struct posd *d, char *msg, size_t cap);
int posd_profiles_reset(struct posd *d, char *msg, size_t cap);

#endif
