/* CUDA arrays and mipmapped arrays: their descriptors and the device memory they hold, the
 * element size (format x channels, or the block size of a compressed or video format) times
 * the extents, the levels of a mipmapped array summed. Arrays take device memory only: the
 * texture and array copies that would fill them are not modelled. */
#include "sim/driver/drv.h"

#include <stdlib.h>
#include <string.h>

struct drv_mipmap;

struct drv_array {
    CUarray handle;
    CUDA_ARRAY3D_DESCRIPTOR d;
    uint64_t bytes;
    struct drv_mipmap *parent; /* a level of it: freed with it */
    struct drv_ctx *ctx;       /* the context it goes with */
    struct drv_array *next;    /* in arrays */
};

struct drv_mipmap {
    CUmipmappedArray handle;
    CUDA_ARRAY3D_DESCRIPTOR d;
    unsigned nlevels;
    uint64_t bytes;
    struct drv_array *levels; /* [nlevels], their handles made on first cuMipmappedArrayGetLevel */
    struct drv_ctx *ctx;
    struct drv_mipmap *next; /* in mipmaps */
};

/* Every live array and mipmapped array, for their contexts' destruction. */
static pthread_mutex_t array_lock = PTHREAD_MUTEX_INITIALIZER;
static struct drv_array *arrays;
static struct drv_mipmap *mipmaps;

/* One format: bytes per element (per block of BW x BH texels for block formats) and the
 * channels it must have (0: 1, 2 or 4, as NumChannels says). */
struct format {
    unsigned fmt;
    unsigned bytes;
    unsigned channels;
    unsigned bw, bh; /* block size, 1 x 1 for plain formats */
};

static const struct format formats[] = {
    {CU_AD_FORMAT_UNSIGNED_INT8, 1, 0, 1, 1},    {CU_AD_FORMAT_UNSIGNED_INT16, 2, 0, 1, 1},
    {CU_AD_FORMAT_UNSIGNED_INT32, 4, 0, 1, 1},   {CU_AD_FORMAT_SIGNED_INT8, 1, 0, 1, 1},
    {CU_AD_FORMAT_SIGNED_INT16, 2, 0, 1, 1},     {CU_AD_FORMAT_SIGNED_INT32, 4, 0, 1, 1},
    {CU_AD_FORMAT_HALF, 2, 0, 1, 1},             {CU_AD_FORMAT_FLOAT, 4, 0, 1, 1},
    {CU_AD_FORMAT_UNORM_INT8X1, 1, 1, 1, 1},     {CU_AD_FORMAT_UNORM_INT8X2, 2, 2, 1, 1},
    {CU_AD_FORMAT_UNORM_INT8X4, 4, 4, 1, 1},     {CU_AD_FORMAT_UNORM_INT16X1, 2, 1, 1, 1},
    {CU_AD_FORMAT_UNORM_INT16X2, 4, 2, 1, 1},    {CU_AD_FORMAT_UNORM_INT16X4, 8, 4, 1, 1},
    {CU_AD_FORMAT_SNORM_INT8X1, 1, 1, 1, 1},     {CU_AD_FORMAT_SNORM_INT8X2, 2, 2, 1, 1},
    {CU_AD_FORMAT_SNORM_INT8X4, 4, 4, 1, 1},     {CU_AD_FORMAT_SNORM_INT16X1, 2, 1, 1, 1},
    {CU_AD_FORMAT_SNORM_INT16X2, 4, 2, 1, 1},    {CU_AD_FORMAT_SNORM_INT16X4, 8, 4, 1, 1},
    {CU_AD_FORMAT_UNORM_INT_101010_2, 4, 4, 1, 1},
    /* block-compressed: 8 or 16 bytes per 4x4 block */
    {CU_AD_FORMAT_BC1_UNORM, 8, 4, 4, 4},        {CU_AD_FORMAT_BC1_UNORM_SRGB, 8, 4, 4, 4},
    {CU_AD_FORMAT_BC2_UNORM, 16, 4, 4, 4},       {CU_AD_FORMAT_BC2_UNORM_SRGB, 16, 4, 4, 4},
    {CU_AD_FORMAT_BC3_UNORM, 16, 4, 4, 4},       {CU_AD_FORMAT_BC3_UNORM_SRGB, 16, 4, 4, 4},
    {CU_AD_FORMAT_BC4_UNORM, 8, 1, 4, 4},        {CU_AD_FORMAT_BC4_SNORM, 8, 1, 4, 4},
    {CU_AD_FORMAT_BC5_UNORM, 16, 2, 4, 4},       {CU_AD_FORMAT_BC5_SNORM, 16, 2, 4, 4},
    {CU_AD_FORMAT_BC6H_UF16, 16, 3, 4, 4},       {CU_AD_FORMAT_BC6H_SF16, 16, 3, 4, 4},
    {CU_AD_FORMAT_BC7_UNORM, 16, 4, 4, 4},       {CU_AD_FORMAT_BC7_UNORM_SRGB, 16, 4, 4, 4},
    /* video formats, per 2x2 (4:2:0), 2x1 (4:2:2) or 1x1 (4:4:4) pixel group, all planes */
    {CU_AD_FORMAT_NV12, 6, 3, 2, 2},             {CU_AD_FORMAT_P010, 12, 3, 2, 2},
    {CU_AD_FORMAT_P016, 12, 3, 2, 2},            {CU_AD_FORMAT_NV16, 4, 3, 2, 1},
    {CU_AD_FORMAT_P210, 8, 3, 2, 1},             {CU_AD_FORMAT_P216, 8, 3, 2, 1},
    {CU_AD_FORMAT_YUY2, 4, 3, 2, 1},             {CU_AD_FORMAT_Y210, 8, 3, 2, 1},
    {CU_AD_FORMAT_Y216, 8, 3, 2, 1},             {CU_AD_FORMAT_AYUV, 4, 4, 1, 1},
    {CU_AD_FORMAT_Y410, 4, 4, 1, 1},             {CU_AD_FORMAT_Y416, 8, 4, 1, 1},
    {CU_AD_FORMAT_Y444_PLANAR8, 3, 3, 1, 1},     {CU_AD_FORMAT_Y444_PLANAR10, 6, 3, 1, 1},
};

static const struct format *format_of(unsigned fmt)
{
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (formats[i].fmt == fmt)
            return &formats[i];
    return NULL;
}

/* a * b without wrapping: 0 when it would. */
static uint64_t mul(uint64_t a, uint64_t b)
{
    return b && a > UINT64_MAX / b ? 0 : a * b;
}

/* Bytes of one level of extents W x H x D (0: a dimension the array lacks) in format F with
 * CH channels; 0 when it would not fit in 64 bits. */
static uint64_t level_bytes(const struct format *f, unsigned ch, uint64_t w, uint64_t h,
                            uint64_t d)
{
    uint64_t bw = (w + f->bw - 1) / f->bw, bh = ((h ? h : 1) + f->bh - 1) / f->bh;
    uint64_t elem = f->channels ? f->bytes : mul(f->bytes, ch);
    return mul(mul(mul(bw, bh), d ? d : 1), elem);
}

/* Checks a descriptor as cuArray3DCreate does: 0 and *F, or the error. */
static CUresult desc_check(const CUDA_ARRAY3D_DESCRIPTOR *d, const struct format **f)
{
    const unsigned known = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP |
                           CUDA_ARRAY3D_TEXTURE_GATHER | CUDA_ARRAY3D_DEPTH_TEXTURE |
                           CUDA_ARRAY3D_COLOR_ATTACHMENT | CUDA_ARRAY3D_SPARSE |
                           CUDA_ARRAY3D_DEFERRED_MAPPING | CUDA_ARRAY3D_VIDEO_ENCODE_DECODE;
    *f = format_of(d->Format);
    if (!*f || d->Width == 0 || (d->Height == 0 && d->Depth != 0 &&
                                 !(d->Flags & CUDA_ARRAY3D_LAYERED)) ||
        (d->Flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    if ((*f)->channels ? d->NumChannels != (*f)->channels && d->NumChannels != 0
                       : d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4)
        return CUDA_ERROR_INVALID_VALUE;
    /* a cubemap is 6 square faces (layered: a multiple of 6) */
    if ((d->Flags & CUDA_ARRAY3D_CUBEMAP) &&
        (d->Width != d->Height ||
         ((d->Flags & CUDA_ARRAY3D_LAYERED) ? d->Depth % 6 != 0 || d->Depth == 0 : d->Depth != 6)))
        return CUDA_ERROR_INVALID_VALUE;
    /* the simulated device has no sparse or deferred-mapping arrays (attributes 0) */
    if (d->Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(out && d, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    const struct format *f;
    rc = desc_check(d, &f);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t bytes = level_bytes(f, d->NumChannels, d->Width, d->Height, d->Depth);
    if (!bytes)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct drv_array *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->d = *d;
    a->bytes = bytes;
    rc = drv_mem_charge(bytes, CHARGE_ALLOC);
    if (rc == CUDA_SUCCESS && !(a->handle = drv_handle_new(H_ARRAY, a))) {
        drv_mem_uncharge(bytes, CHARGE_ALLOC);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc != CUDA_SUCCESS) {
        free(a);
        return rc;
    }
    a->ctx = c;
    pthread_mutex_lock(&array_lock);
    a->next = arrays;
    arrays = a;
    pthread_mutex_unlock(&array_lock);
    *out = a->handle;
    return CUDA_SUCCESS;
}

/* Takes A off the list and frees it (caller holds array_lock). */
static void array_free(struct drv_array *a)
{
    for (struct drv_array **pp = &arrays; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    drv_handle_free(H_ARRAY, a->handle);
    drv_mem_uncharge(a->bytes, CHARGE_ALLOC);
    free(a);
}

API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    if (!pAllocateArray)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = pAllocateArray->Width,
                                 .Height = pAllocateArray->Height,
                                 .Format = pAllocateArray->Format,
                                 .NumChannels = pAllocateArray->NumChannels};
    return array_create(pHandle, &d);
}

API CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
    return array_create(pHandle, pAllocateArray);
}

API CUresult cuArrayDestroy(CUarray hArray)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    drv_sync_all();
    pthread_mutex_lock(&array_lock);
    struct drv_array *a = drv_handle_get(H_ARRAY, hArray);
    int ok = a && !a->parent; /* a level goes with its mipmapped array */
    if (ok)
        array_free(a);
    pthread_mutex_unlock(&array_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
    CUresult rc = drv_check_init_out(pArrayDescriptor);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_array *a = drv_handle_get(H_ARRAY, hArray);
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    *pArrayDescriptor = a->d;
    return CUDA_SUCCESS;
}

API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    if (!pArrayDescriptor)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = cuArray3DGetDescriptor_v2(&d, hArray);
    if (rc != CUDA_SUCCESS)
        return rc;
    *pArrayDescriptor = (CUDA_ARRAY_DESCRIPTOR){d.Width, d.Height, d.Format, d.NumChannels};
    return CUDA_SUCCESS;
}

/* ---- mipmapped arrays ------------------------------------------------------------------- */

/* Extent of level L of a dimension of E texels: halved per level, at least 1 (0 stays 0). */
static size_t level_extent(size_t e, unsigned l)
{
    if (!e)
        return 0;
    e >>= l < 64 ? l : 63;
    return e ? e : 1;
}

API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                    const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                    unsigned int numMipmapLevels)
{
    struct drv_ctx *c;
    CUresult rc = drv_enter_ctx(pHandle && pMipmappedArrayDesc && numMipmapLevels != 0, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    const CUDA_ARRAY3D_DESCRIPTOR *d = pMipmappedArrayDesc;
    const struct format *f;
    rc = desc_check(d, &f);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* at most 1 + floor(log2(largest extent)) levels; layers are not halved */
    int layered = (d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
    size_t largest = d->Width > d->Height ? d->Width : d->Height;
    if (!layered && d->Depth > largest)
        largest = d->Depth;
    unsigned max_levels = 1;
    while (max_levels < 64 && (largest >> max_levels))
        max_levels++;
    if (numMipmapLevels > max_levels)
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_mipmap *m = calloc(1, sizeof *m);
    struct drv_array *levels = calloc(numMipmapLevels, sizeof *levels);
    if (!m || !levels) {
        free(m);
        free(levels);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->d = *d;
    m->nlevels = numMipmapLevels;
    m->levels = levels;
    for (unsigned l = 0; l < numMipmapLevels; l++) {
        CUDA_ARRAY3D_DESCRIPTOR ld = *d;
        ld.Width = level_extent(d->Width, l);
        ld.Height = level_extent(d->Height, l);
        if (!layered)
            ld.Depth = level_extent(d->Depth, l);
        uint64_t b = level_bytes(f, ld.NumChannels, ld.Width, ld.Height, ld.Depth);
        levels[l] = (struct drv_array){.d = ld, .bytes = b, .parent = m};
        m->bytes = b && m->bytes <= UINT64_MAX - b ? m->bytes + b : UINT64_MAX;
    }
    rc = m->bytes == UINT64_MAX ? CUDA_ERROR_OUT_OF_MEMORY : drv_mem_charge(m->bytes, CHARGE_ALLOC);
    if (rc == CUDA_SUCCESS && !(m->handle = drv_handle_new(H_MIPMAP, m))) {
        drv_mem_uncharge(m->bytes, CHARGE_ALLOC);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc != CUDA_SUCCESS) {
        free(levels);
        free(m);
        return rc;
    }
    m->ctx = c;
    pthread_mutex_lock(&array_lock);
    m->next = mipmaps;
    mipmaps = m;
    pthread_mutex_unlock(&array_lock);
    *pHandle = m->handle;
    return CUDA_SUCCESS;
}

API CUresult cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray hMipmappedArray,
                                      unsigned int level)
{
    CUresult rc = drv_check_init_out(pLevelArray);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct drv_mipmap *m = drv_handle_get(H_MIPMAP, hMipmappedArray);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    if (level >= m->nlevels)
        return CUDA_ERROR_INVALID_VALUE;
    struct drv_array *a = &m->levels[level];
    if (!a->handle && !(a->handle = drv_handle_new(H_ARRAY, a)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pLevelArray = a->handle;
    return CUDA_SUCCESS;
}

/* Takes M off the list and frees it with its levels (caller holds array_lock). */
static void mipmap_free(struct drv_mipmap *m)
{
    for (struct drv_mipmap **pp = &mipmaps; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    drv_handle_free(H_MIPMAP, m->handle);
    for (unsigned l = 0; l < m->nlevels; l++)
        if (m->levels[l].handle)
            drv_handle_free(H_ARRAY, m->levels[l].handle);
    drv_mem_uncharge(m->bytes, CHARGE_ALLOC);
    free(m->levels);
    free(m);
}

API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    drv_sync_all();
    pthread_mutex_lock(&array_lock);
    struct drv_mipmap *m = drv_handle_get(H_MIPMAP, hMipmappedArray);
    if (m)
        mipmap_free(m);
    pthread_mutex_unlock(&array_lock);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

void drv_array_ctx_gone(struct drv_ctx *ctx)
{
    pthread_mutex_lock(&array_lock);
    for (struct drv_array *a = arrays, *next; a; a = next) {
        next = a->next;
        if (a->ctx == ctx)
            array_free(a);
    }
    for (struct drv_mipmap *m = mipmaps, *next; m; m = next) {
        next = m->next;
        if (m->ctx == ctx)
            mipmap_free(m);
    }
    pthread_mutex_unlock(&array_lock);
}

static void __attribute__((constructor)) ctx_gone_register(void)
{
    drv_ctx_on_gone(0, drv_array_ctx_gone);
}
