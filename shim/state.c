/* What the shim knows of this process's life, read everywhere and written at a few points:
 * whether records are kept (shim_active: set at load unless POS_MODE=off, cleared in the child
 * of a fork after cuInit), whether cuInit succeeded (shim_cuda_inited), and how many stream
 * captures are under way (shim_captures, which the launch path reads). */
#include "shim/shim.h"

int shim_active;
int shim_cuda_inited;
_Atomic int shim_captures;
