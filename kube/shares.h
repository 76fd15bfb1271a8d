/* The device plugin's share IDs: each GPU is advertised to the kubelet as N shares, device IDs
 * "gpu<ORD>-<K>" (ORD the GPU's ordinal, K 0..N-1), and a request for shares is packed onto the
 * fewest GPUs. Pure: tests/unit/test_kube_shares.c drives it. */
#ifndef POS_KUBE_SHARES_H
#define POS_KUBE_SHARES_H

#include <stddef.h>

#define KUBE_GPUS_MAX   64  /* ordinals 0..63, as kube/edits.h */
#define KUBE_SHARES_MAX 256 /* shares per GPU: 64 x 256 IDs fit one ListAndWatch message */
#define KUBE_SHARE_ID_MAX 16 /* "gpu63-255" and its NUL, with room */

/* Writes the ID of share K of GPU GPU into BUF (KUBE_SHARE_ID_MAX bytes). */
void kube_share_id(char *buf, int gpu, int k);

/* Parses ID as a share ID written by kube_share_id (decimal, no sign, no leading zero, nothing
 * after). Returns 0 with *GPU and *K, or -EINVAL. */
int kube_share_parse(const char *id, int *gpu, int *k);

/* The kubelet's GetPreferredAllocation for one container: SIZE IDs out of AVAIL[0..N_AVAIL)
 * that include MUST[0..N_MUST) and touch the fewest GPUs (the GPUs that MUST already uses
 * first, then those with the most available shares, lower ordinals first on a tie). The chosen
 * IDs (pointers into AVAIL and MUST) go to OUT (SIZE entries). IDs that are no share ID are
 * skipped. Returns how many were chosen: SIZE, or fewer when AVAIL has too few. */
size_t kube_shares_prefer(const char *const *avail, size_t n_avail, const char *const *must,
                          size_t n_must, size_t size, const char **out);

#endif
