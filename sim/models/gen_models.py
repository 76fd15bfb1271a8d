#!/usr/bin/env python3
"""Generator of the model workload files sim/models/NAME.model of the simulated GPU.

Each architecture is described here layer by layer; the rules that turn a layer into
one kernel launch (FLOPs, bytes, grid, block, shared memory) are in the helpers below
and are written down in docs/models.md. The format is in docs/sim-formats.md.

    python3 sim/models/gen_models.py            # (re)write every .model file
    python3 sim/models/gen_models.py --check    # exit 1 if a committed file differs
    python3 sim/models/gen_models.py --summary  # print totals per model

Python 3 standard library only. The output is deterministic (integers only).
"""

import argparse
import os
import sys

F32 = 4              # bytes per fp32 element
EW_BLOCK = 256       # threads per block of one-thread-per-element kernels
MAX_SMEM = 48 * 1024  # static shared memory a kernel may have without opting in

# Per-element FLOPs of the kernels that are not GEMMs (docs/models.md, "FLOPs").
FL_ADD = 1          # add, multiply (SE scale)
FL_SIGMOID = 4      # sigmoid on a segmentation output
FL_DECODE = 8       # YOLO box decode: sigmoid + affine per output value
FL_SOFTMAX = 5      # scale+mask, max, exp, sum, divide
FL_LAYERNORM = 8    # residual add, mean, variance, normalise, scale and shift
FL_EMBED = 10       # sum of three embeddings (2) + layernorm (8)
FL_COPY = 0         # upsample, space-to-depth


def ceil_div(a, b):
    return -(-a // b)


def gemm_tiling(m, n):
    """Tile choice of the GEMM heuristic: (tile edge, threads per block, smem bytes).

    128x128 tiles when M and N are both >= 128, else 64x64 when both are >= 64, else
    32x32. Shared memory holds an A and a B tile of a K-chunk, double-buffered, fp32:
    (tileM + tileN) * kchunk * 4 * 2. The K-chunk is 32, except 16 for the 128x128
    tile, which keeps it at 32 KiB, under the 48 KiB of static shared memory a kernel
    can have on CUDA without opting in.
    """
    if m >= 128 and n >= 128:
        tile, threads, kchunk = 128, 256, 16
    elif m >= 64 and n >= 64:
        tile, threads, kchunk = 64, 128, 32
    else:
        tile, threads, kchunk = 32, 64, 32
    smem = (tile + tile) * kchunk * F32 * 2
    assert smem <= MAX_SMEM
    return tile, threads, smem


class Model:
    """The kernel sequence of one model at batch 1, built by the layer helpers."""

    def __init__(self, name, source):
        self.name = name
        self.source = source
        self.ops = []
        self.names = set()
        # Parameters the model declares but that one inference does not read in full
        # (BERT's embedding tables); the rest of the parameters are the weight bytes.
        self.unread_params = 0

    # --- the one place an op line is made ---------------------------------------------
    def emit(self, name, grid, block, smem, flops, w_elems, a_elems):
        assert name not in self.names, "duplicate op name %s in %s" % (name, self.name)
        assert len(name) <= 127
        assert all(g >= 1 for g in grid) and all(b >= 1 for b in block)
        assert block[0] * block[1] * block[2] <= 1024
        assert grid[1] <= 65535 and grid[2] <= 65535
        assert flops >= 0 and w_elems >= 0 and a_elems >= 0
        self.names.add(name)
        self.ops.append((name, tuple(grid), tuple(block), smem, int(flops),
                         int(w_elems) * F32, int(a_elems) * F32))

    # --- launch shapes ------------------------------------------------------------------
    def gemm(self, name, m, n, k, w_elems, a_elems, batch=1, extra_flops=0):
        """A GEMM-like kernel: C[M,N] = A[M,K] B[K,N], BATCH independent ones (grid Z)."""
        tile, threads, smem = gemm_tiling(m, n)
        grid = (ceil_div(m, tile), ceil_div(n, tile), batch)
        self.emit(name, grid, (threads, 1, 1), smem, 2 * m * n * k * batch + extra_flops,
                  w_elems, a_elems)

    def eltwise(self, name, out_elems, flops_per_elem, a_elems, w_elems=0):
        """One thread per output element, 256 per block."""
        self.emit(name, (ceil_div(out_elems, EW_BLOCK), 1, 1), (EW_BLOCK, 1, 1), 0,
                  out_elems * flops_per_elem, w_elems, a_elems)

    def rowwise(self, name, rows, row_len, flops_per_elem, a_elems, w_elems=0):
        """A reduction: one block per row, 128 threads for rows of <= 128, else 256."""
        threads = 128 if row_len <= 128 else 256
        self.emit(name, (rows, 1, 1), (threads, 1, 1), 0, rows * row_len * flops_per_elem,
                  w_elems, a_elems)

    # --- CNN layers; a tensor is (C, H, W) at batch 1 ---------------------------------
    def conv(self, name, x, cout, k, stride=1, pad=None, groups=1, residual=False):
        """Convolution with its BN folded (weights + one bias per output channel) and its
        activation fused. RESIDUAL: the residual add is fused into the epilogue, which
        reads the residual tensor (same shape as the output)."""
        cin, h, w = x
        kh, kw = (k, k) if isinstance(k, int) else k
        if pad is None:
            pad = (kh // 2, kw // 2)
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        ho = (h + 2 * ph - kh) // stride + 1
        wo = (w + 2 * pw - kw) // stride + 1
        out_elems = cout * ho * wo
        w_elems = cin // groups * kh * kw * cout + cout
        a_elems = cin * h * w + out_elems + (out_elems if residual else 0)
        flops = 2 * (cin // groups) * kh * kw * cout * ho * wo
        if groups == 1:
            tile, threads, smem = gemm_tiling(ho * wo, cout)
            grid = (ceil_div(ho * wo, tile), ceil_div(cout, tile), 1)
            self.emit(name, grid, (threads, 1, 1), smem, flops, w_elems, a_elems)
        elif groups == cin == cout:
            self.emit(name, (ceil_div(out_elems, EW_BLOCK), 1, 1), (EW_BLOCK, 1, 1), 0,
                      flops, w_elems, a_elems)
        else:
            raise ValueError("grouped convolution other than depthwise: " + name)
        return (cout, ho, wo)

    def pool(self, name, x, k, stride, pad=0):
        """Max or average pooling: K*K FLOPs (compares or adds) per output element."""
        c, h, w = x
        ho = (h + 2 * pad - k) // stride + 1
        wo = (w + 2 * pad - k) // stride + 1
        out = c * ho * wo
        self.eltwise(name, out, k * k, c * h * w + out)
        return (c, ho, wo)

    def global_pool(self, name, x):
        """Global average pooling: one thread per channel, H*W adds each."""
        c, h, w = x
        self.eltwise(name, c, h * w, c * h * w + c)
        return (c, 1, 1)

    def fc(self, name, nin, nout):
        """Fully connected layer at batch 1: a GEMM with M = 1."""
        self.gemm(name, 1, nout, nin, nin * nout + nout, nin + nout)
        return nout

    def upsample2x(self, name, x):
        """Nearest-neighbour 2x upsampling: one thread per output element, no FLOPs."""
        c, h, w = x
        out = c * 4 * h * w
        self.eltwise(name, out, FL_COPY, c * h * w + out)
        return (c, 2 * h, 2 * w)

    # --- output ---------------------------------------------------------------------------
    def params(self):
        return sum(op[5] for op in self.ops) // F32 + self.unread_params

    def totals(self):
        flops = sum(op[4] for op in self.ops)
        wbytes = sum(op[5] for op in self.ops)
        abytes = sum(op[6] for op in self.ops)
        return flops, wbytes, abytes

    def render(self):
        flops, wbytes, abytes = self.totals()
        assert len(self.source) <= 255
        lines = [
            "# pos-sim model v1",
            "# Generated by sim/models/gen_models.py; do not edit. Derivation: docs/models.md.",
            "model " + self.name,
            "source " + self.source,
            "dtype fp32",
            "params %d" % self.params(),
            "# batch 1 totals: %d ops, %.3f GFLOPs (%.3f GMACs), %.2f M params read "
            "(%.1f MB), %.1f MB activations" % (len(self.ops), flops / 1e9, flops / 2e9,
                                                 wbytes / F32 / 1e6, wbytes / 1e6,
                                                 abytes / 1e6),
            "# op NAME GX,GY,GZ BX,BY,BZ SMEM FLOPS WEIGHT_BYTES ACT_BYTES",
        ]
        for name, g, b, smem, fl, wb, ab in self.ops:
            lines.append("op %s %d,%d,%d %d,%d,%d %d %d %d %d" %
                         (name, g[0], g[1], g[2], b[0], b[1], b[2], smem, fl, wb, ab))
        return "\n".join(lines) + "\n"


# ======================================================================================
# ResNet (He et al. 2016), torchvision layout (v1.5: stride in the 3x3 conv of a
# bottleneck). The downsample branch is emitted before the main branch of its block;
# the residual add (+ReLU) is fused into the last conv of the block.
# ======================================================================================
def resnet(name, bottleneck, layers):
    expansion = 4 if bottleneck else 1
    m = Model(name, "torchvision %s, 224x224 input, batch 1; conv+BN+ReLU fused; residual add "
                    "fused into the block's last conv; %s" %
              (name, "stride in the 3x3 conv (v1.5)" if bottleneck else "basic blocks"))
    x = m.conv("conv1", (3, 224, 224), 64, 7, stride=2, pad=3)
    x = m.pool("maxpool", x, 3, 2, 1)
    for li, (planes, nblocks) in enumerate(zip((64, 128, 256, 512), layers)):
        for bi in range(nblocks):
            stride = 2 if (li > 0 and bi == 0) else 1
            pre = "layer%d.%d" % (li + 1, bi)
            if stride != 1 or x[0] != planes * expansion:
                m.conv(pre + ".downsample", x, planes * expansion, 1, stride=stride, pad=0)
            if bottleneck:
                y = m.conv(pre + ".conv1", x, planes, 1, pad=0)
                y = m.conv(pre + ".conv2", y, planes, 3, stride=stride)
                y = m.conv(pre + ".conv3", y, planes * 4, 1, pad=0, residual=True)
            else:
                y = m.conv(pre + ".conv1", x, planes, 3, stride=stride)
                y = m.conv(pre + ".conv2", y, planes, 3, residual=True)
            x = y
    x = m.global_pool("avgpool", x)
    m.fc("fc", x[0], 1000)
    return m


# ======================================================================================
# GoogLeNet / Inception v1 (Szegedy et al. 2015, Table 1): 5x5 convs as in the paper,
# no LRN, no auxiliary classifiers. Branches run in order 1x1, 3x3, 5x5, pool.
# ======================================================================================
def inception_v1():
    m = Model("inception_v1", "GoogLeNet (Szegedy et al. 2015, Table 1), 224x224 input, batch 1; "
                              "5x5 branch as in the paper, no LRN, no aux heads; conv+BN+ReLU "
                              "fused; concat free")
    x = m.conv("conv1", (3, 224, 224), 64, 7, stride=2, pad=3)
    x = m.pool("maxpool1", x, 3, 2, 1)
    x = m.conv("conv2.reduce1x1", x, 64, 1, pad=0)
    x = m.conv("conv2.conv3x3", x, 192, 3)
    x = m.pool("maxpool2", x, 3, 2, 1)

    def module(tag, x, c1, c3r, c3, c5r, c5, cp):
        p = "inception" + tag
        _, h, w = x
        m.conv(p + ".branch1.conv1x1", x, c1, 1, pad=0)
        y = m.conv(p + ".branch2.reduce1x1", x, c3r, 1, pad=0)
        m.conv(p + ".branch2.conv3x3", y, c3, 3)
        y = m.conv(p + ".branch3.reduce1x1", x, c5r, 1, pad=0)
        m.conv(p + ".branch3.conv5x5", y, c5, 5)
        y = m.pool(p + ".branch4.maxpool3x3", x, 3, 1, 1)
        m.conv(p + ".branch4.proj1x1", y, cp, 1, pad=0)
        return (c1 + c3 + c5 + cp, h, w)

    x = module("3a", x, 64, 96, 128, 16, 32, 32)
    x = module("3b", x, 128, 128, 192, 32, 96, 64)
    x = m.pool("maxpool3", x, 3, 2, 1)
    x = module("4a", x, 192, 96, 208, 16, 48, 64)
    x = module("4b", x, 160, 112, 224, 24, 64, 64)
    x = module("4c", x, 128, 128, 256, 24, 64, 64)
    x = module("4d", x, 112, 144, 288, 32, 64, 64)
    x = module("4e", x, 256, 160, 320, 32, 128, 128)
    x = m.pool("maxpool4", x, 3, 2, 1)
    x = module("5a", x, 256, 160, 320, 32, 128, 128)
    x = module("5b", x, 384, 192, 384, 48, 128, 128)
    x = m.global_pool("avgpool", x)
    m.fc("fc", x[0], 1000)
    return m


# ======================================================================================
# BN-Inception / Inception v2 (Ioffe & Szegedy 2015, Figure 5): the 5x5 branch is two
# stacked 3x3 convs; 3c and 4e reduce the grid (stride 2 in their 3x3 convs and a
# pass-through max pool). Branches run in order 1x1, 3x3, double 3x3, pool.
# ======================================================================================
def inception_v2():
    m = Model("inception_v2", "BN-Inception (Ioffe & Szegedy 2015, Figure 5), 224x224 input, "
                              "batch 1; conv+BN+ReLU fused; concat free")
    x = m.conv("conv1", (3, 224, 224), 64, 7, stride=2, pad=3)
    x = m.pool("maxpool1", x, 3, 2, 1)
    x = m.conv("conv2.reduce1x1", x, 64, 1, pad=0)
    x = m.conv("conv2.conv3x3", x, 192, 3)
    x = m.pool("maxpool2", x, 3, 2, 1)

    def module(tag, x, c1, c3r, c3, d3r, d3, pool, cp):
        p = "inception" + tag
        cin, h, w = x
        s = 2 if c1 == 0 else 1  # the grid-reducing modules have no 1x1 branch
        cout = 0
        if c1:
            m.conv(p + ".branch1.conv1x1", x, c1, 1, pad=0)
            cout += c1
        y = m.conv(p + ".branch2.reduce1x1", x, c3r, 1, pad=0)
        y = m.conv(p + ".branch2.conv3x3", y, c3, 3, stride=s)
        cout += c3
        y = m.conv(p + ".branch3.reduce1x1", x, d3r, 1, pad=0)
        y = m.conv(p + ".branch3.conv3x3a", y, d3, 3)
        m.conv(p + ".branch3.conv3x3b", y, d3, 3, stride=s)
        cout += d3
        y = m.pool(p + ".branch4.%spool3x3" % pool, x, 3, s, 1)
        if cp:
            m.conv(p + ".branch4.proj1x1", y, cp, 1, pad=0)
            cout += cp
        else:
            cout += cin  # pass-through: the pool writes its slice of the output
        return (cout, y[1], y[2])

    x = module("3a", x, 64, 64, 64, 64, 96, "avg", 32)
    x = module("3b", x, 64, 64, 96, 64, 96, "avg", 64)
    x = module("3c", x, 0, 128, 160, 64, 96, "max", 0)
    x = module("4a", x, 224, 64, 96, 96, 128, "avg", 128)
    x = module("4b", x, 192, 96, 128, 96, 128, "avg", 128)
    x = module("4c", x, 160, 128, 160, 128, 160, "avg", 128)
    x = module("4d", x, 96, 128, 192, 160, 192, "avg", 128)
    x = module("4e", x, 0, 128, 192, 192, 256, "max", 0)
    x = module("5a", x, 352, 192, 320, 160, 224, "avg", 128)
    x = module("5b", x, 352, 192, 320, 192, 224, "max", 128)
    assert x == (1024, 7, 7), x
    x = m.global_pool("avgpool", x)
    m.fc("fc", x[0], 1000)
    return m


# ======================================================================================
# Inception v3 (Szegedy et al. 2016), torchvision layout, at its native 299x299 input,
# without the auxiliary classifier. Branches run in torchvision's forward order.
# ======================================================================================
def inception_v3():
    m = Model("inception_v3", "torchvision inception_v3 (Szegedy et al. 2016), 299x299 input "
                              "(its native size), batch 1, no aux classifier; conv+BN+ReLU "
                              "fused; concat free")
    x = m.conv("conv2d_1a_3x3", (3, 299, 299), 32, 3, stride=2, pad=0)
    x = m.conv("conv2d_2a_3x3", x, 32, 3, pad=0)
    x = m.conv("conv2d_2b_3x3", x, 64, 3, pad=1)
    x = m.pool("maxpool1", x, 3, 2)
    x = m.conv("conv2d_3b_1x1", x, 80, 1, pad=0)
    x = m.conv("conv2d_4a_3x3", x, 192, 3, pad=0)
    x = m.pool("maxpool2", x, 3, 2)
    assert x == (192, 35, 35), x

    def block_a(p, x, pool_features):
        _, h, w = x
        m.conv(p + ".branch1x1", x, 64, 1, pad=0)
        y = m.conv(p + ".branch5x5_1", x, 48, 1, pad=0)
        m.conv(p + ".branch5x5_2", y, 64, 5, pad=2)
        y = m.conv(p + ".branch3x3dbl_1", x, 64, 1, pad=0)
        y = m.conv(p + ".branch3x3dbl_2", y, 96, 3, pad=1)
        m.conv(p + ".branch3x3dbl_3", y, 96, 3, pad=1)
        y = m.pool(p + ".branch_pool.avgpool", x, 3, 1, 1)
        m.conv(p + ".branch_pool.conv1x1", y, pool_features, 1, pad=0)
        return (64 + 64 + 96 + pool_features, h, w)

    def block_b(p, x):
        cin = x[0]
        y0 = m.conv(p + ".branch3x3", x, 384, 3, stride=2, pad=0)
        y = m.conv(p + ".branch3x3dbl_1", x, 64, 1, pad=0)
        y = m.conv(p + ".branch3x3dbl_2", y, 96, 3, pad=1)
        m.conv(p + ".branch3x3dbl_3", y, 96, 3, stride=2, pad=0)
        m.pool(p + ".branch_pool.maxpool", x, 3, 2)
        return (384 + 96 + cin, y0[1], y0[2])

    def block_c(p, x, c7):
        _, h, w = x
        m.conv(p + ".branch1x1", x, 192, 1, pad=0)
        y = m.conv(p + ".branch7x7_1", x, c7, 1, pad=0)
        y = m.conv(p + ".branch7x7_2", y, c7, (1, 7), pad=(0, 3))
        m.conv(p + ".branch7x7_3", y, 192, (7, 1), pad=(3, 0))
        y = m.conv(p + ".branch7x7dbl_1", x, c7, 1, pad=0)
        y = m.conv(p + ".branch7x7dbl_2", y, c7, (7, 1), pad=(3, 0))
        y = m.conv(p + ".branch7x7dbl_3", y, c7, (1, 7), pad=(0, 3))
        y = m.conv(p + ".branch7x7dbl_4", y, c7, (7, 1), pad=(3, 0))
        m.conv(p + ".branch7x7dbl_5", y, 192, (1, 7), pad=(0, 3))
        y = m.pool(p + ".branch_pool.avgpool", x, 3, 1, 1)
        m.conv(p + ".branch_pool.conv1x1", y, 192, 1, pad=0)
        return (768, h, w)

    def block_d(p, x):
        cin = x[0]
        y = m.conv(p + ".branch3x3_1", x, 192, 1, pad=0)
        y0 = m.conv(p + ".branch3x3_2", y, 320, 3, stride=2, pad=0)
        y = m.conv(p + ".branch7x7x3_1", x, 192, 1, pad=0)
        y = m.conv(p + ".branch7x7x3_2", y, 192, (1, 7), pad=(0, 3))
        y = m.conv(p + ".branch7x7x3_3", y, 192, (7, 1), pad=(3, 0))
        m.conv(p + ".branch7x7x3_4", y, 192, 3, stride=2, pad=0)
        m.pool(p + ".branch_pool.maxpool", x, 3, 2)
        return (320 + 192 + cin, y0[1], y0[2])

    def block_e(p, x):
        _, h, w = x
        m.conv(p + ".branch1x1", x, 320, 1, pad=0)
        y = m.conv(p + ".branch3x3_1", x, 384, 1, pad=0)
        m.conv(p + ".branch3x3_2a", y, 384, (1, 3), pad=(0, 1))
        m.conv(p + ".branch3x3_2b", y, 384, (3, 1), pad=(1, 0))
        y = m.conv(p + ".branch3x3dbl_1", x, 448, 1, pad=0)
        y = m.conv(p + ".branch3x3dbl_2", y, 384, 3, pad=1)
        m.conv(p + ".branch3x3dbl_3a", y, 384, (1, 3), pad=(0, 1))
        m.conv(p + ".branch3x3dbl_3b", y, 384, (3, 1), pad=(1, 0))
        y = m.pool(p + ".branch_pool.avgpool", x, 3, 1, 1)
        m.conv(p + ".branch_pool.conv1x1", y, 192, 1, pad=0)
        return (2048, h, w)

    x = block_a("mixed_5b", x, 32)
    x = block_a("mixed_5c", x, 64)
    x = block_a("mixed_5d", x, 64)
    x = block_b("mixed_6a", x)
    assert x == (768, 17, 17), x
    x = block_c("mixed_6b", x, 128)
    x = block_c("mixed_6c", x, 160)
    x = block_c("mixed_6d", x, 160)
    x = block_c("mixed_6e", x, 192)
    x = block_d("mixed_7a", x)
    assert x == (1280, 8, 8), x
    x = block_e("mixed_7b", x)
    x = block_e("mixed_7c", x)
    x = m.global_pool("avgpool", x)
    m.fc("fc", x[0], 1000)
    return m


# ======================================================================================
# MobileNet v1 (Howard et al. 2017, Table 1), width 1.0, 224x224.
# ======================================================================================
def mobilenet_v1():
    m = Model("mobilenet_v1", "MobileNet v1 1.0 (Howard et al. 2017, Table 1), 224x224 input, "
                              "batch 1; conv+BN+ReLU fused; depthwise convs one thread per "
                              "output")
    x = m.conv("conv0", (3, 224, 224), 32, 3, stride=2)
    cfg = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
           (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]
    for i, (cout, s) in enumerate(cfg):
        p = "block%d" % (i + 1)
        x = m.conv(p + ".dw3x3", x, x[0], 3, stride=s, groups=x[0])
        x = m.conv(p + ".pw1x1", x, cout, 1, pad=0)
    assert x == (1024, 7, 7), x
    x = m.global_pool("avgpool", x)
    m.fc("fc", x[0], 1000)
    return m


# ======================================================================================
# MobileNet v2 (Sandler et al. 2018, Table 2), width 1.0, 224x224, torchvision layout.
# The residual add is fused into the projection conv.
# ======================================================================================
def mobilenet_v2():
    m = Model("mobilenet_v2", "torchvision mobilenet_v2 1.0 (Sandler et al. 2018), 224x224 "
                              "input, batch 1; conv+BN+ReLU6 fused; residual add fused into "
                              "the projection conv")
    x = m.conv("conv0", (3, 224, 224), 32, 3, stride=2)
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
           (6, 160, 3, 2), (6, 320, 1, 1)]
    bi = 0
    for t, c, n, s in cfg:
        for i in range(n):
            bi += 1
            p = "block%d" % bi
            stride = s if i == 0 else 1
            cin = x[0]
            y = x
            if t != 1:
                y = m.conv(p + ".expand1x1", y, cin * t, 1, pad=0)
            y = m.conv(p + ".dw3x3", y, y[0], 3, stride=stride, groups=y[0])
            residual = stride == 1 and cin == c
            x = m.conv(p + ".project1x1", y, c, 1, pad=0, residual=residual)
    x = m.conv("conv_last1x1", x, 1280, 1, pad=0)
    x = m.global_pool("avgpool", x)
    m.fc("classifier.fc", x[0], 1000)
    return m


# ======================================================================================
# MobileNet v3-Large (Howard et al. 2019, Table 1), width 1.0, 224x224, torchvision
# layout. Squeeze-and-excite: global pool, FC+ReLU, FC+hard-sigmoid, then a separate
# channel-scale kernel; the residual add is fused into the projection conv.
# ======================================================================================
def make_divisible(v, divisor=8):
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def mobilenet_v3():
    m = Model("mobilenet_v3", "torchvision mobilenet_v3_large 1.0 (Howard et al. 2019), "
                              "224x224 input, batch 1; conv+BN+act fused; SE = pool, 2 FCs, "
                              "scale kernel; residual add fused into the projection conv")
    x = m.conv("stem.conv3x3", (3, 224, 224), 16, 3, stride=2)
    # (kernel, expanded, out, SE, stride)
    cfg = [(3, 16, 16, False, 1), (3, 64, 24, False, 2), (3, 72, 24, False, 1),
           (5, 72, 40, True, 2), (5, 120, 40, True, 1), (5, 120, 40, True, 1),
           (3, 240, 80, False, 2), (3, 200, 80, False, 1), (3, 184, 80, False, 1),
           (3, 184, 80, False, 1), (3, 480, 112, True, 1), (3, 672, 112, True, 1),
           (5, 672, 160, True, 2), (5, 960, 160, True, 1), (5, 960, 160, True, 1)]
    for i, (k, exp, cout, se, s) in enumerate(cfg):
        p = "bneck%d" % (i + 1)
        cin = x[0]
        y = x
        if exp != cin:
            y = m.conv(p + ".expand1x1", y, exp, 1, pad=0)
        y = m.conv(p + ".dw%dx%d" % (k, k), y, exp, k, stride=s, groups=exp)
        if se:
            sq = make_divisible(exp // 4)
            c, h, w = y
            m.global_pool(p + ".se.avgpool", y)
            m.fc(p + ".se.fc1", c, sq)
            m.fc(p + ".se.fc2", sq, c)
            m.eltwise(p + ".se.scale", c * h * w, FL_ADD, 2 * c * h * w + c)
        residual = s == 1 and cin == cout
        x = m.conv(p + ".project1x1", y, cout, 1, pad=0, residual=residual)
    assert x == (160, 7, 7), x
    x = m.conv("last.conv1x1", x, 960, 1, pad=0)
    x = m.global_pool("avgpool", x)
    n = m.fc("classifier.fc1", x[0], 1280)
    m.fc("classifier.fc2", n, 1000)
    return m


# ======================================================================================
# YOLOP (Wu et al. 2021, hustvl/YOLOP "YOLOP" config) at 640x384: CSP backbone with SPP,
# FPN neck, then the detection head (PAN + Detect), the drivable-area segmentation head
# and the lane-line segmentation head, emitted one after the other in that order.
# Op names carry the config's layer index: backbone.N, neck.N, det_head.N,
# da_seg_head.N, ll_seg_head.N. Conv = conv+BN+Hardswish fused.
# ======================================================================================
def yolop():
    m = Model("yolop", "YOLOP (Wu et al. 2021, hustvl/YOLOP), 640x384 input (WxH), batch 1, "
                       "1 class; conv+BN+act fused; CSP concat BN folded into cv2/cv3; heads "
                       "det_head, da_seg_head, ll_seg_head run in turn")

    def csp(p, x, c2, n, shortcut):
        """BottleneckCSP: cv1 -> n bottlenecks -> cv3 and cv2 (each with its half of the
        concat's BN + LeakyReLU folded in) -> cv4."""
        c_ = c2 // 2
        y = m.conv(p + ".cv1", x, c_, 1, pad=0)
        for i in range(n):
            z = m.conv(p + ".m%d.cv1" % i, y, c_, 1, pad=0)
            y = m.conv(p + ".m%d.cv2" % i, z, c_, 3, residual=shortcut)
        y = m.conv(p + ".cv3", y, c_, 1, pad=0)
        m.conv(p + ".cv2", x, c_, 1, pad=0)
        return m.conv(p + ".cv4", (2 * c_, y[1], y[2]), c2, 1, pad=0)

    def spp(p, x, c2):
        c_ = x[0] // 2
        y = m.conv(p + ".cv1", x, c_, 1, pad=0)
        for k in (5, 9, 13):
            m.pool(p + ".maxpool%d" % k, y, k, 1, k // 2)
        return m.conv(p + ".cv2", (4 * c_, y[1], y[2]), c2, 1, pad=0)

    def cat(*xs):
        assert all(x[1:] == xs[0][1:] for x in xs)
        return (sum(x[0] for x in xs), xs[0][1], xs[0][2])

    # Encoder: backbone (0-9) and FPN neck (10-16).
    c, h, w = 3, 384, 640
    m.eltwise("backbone.0.focus.space_to_depth", c * h * w, FL_COPY, 2 * c * h * w)
    x = m.conv("backbone.0.focus.conv", (4 * c, h // 2, w // 2), 32, 3)
    x = m.conv("backbone.1.conv", x, 64, 3, stride=2)
    x = csp("backbone.2.csp", x, 64, 1, True)
    x = m.conv("backbone.3.conv", x, 128, 3, stride=2)
    l4 = x = csp("backbone.4.csp", x, 128, 3, True)
    x = m.conv("backbone.5.conv", x, 256, 3, stride=2)
    l6 = x = csp("backbone.6.csp", x, 256, 3, True)
    x = m.conv("backbone.7.conv", x, 512, 3, stride=2)
    x = spp("backbone.8.spp", x, 512)
    x = csp("backbone.9.csp", x, 512, 1, False)
    l10 = x = m.conv("neck.10.conv", x, 256, 1, pad=0)
    x = cat(m.upsample2x("neck.11.upsample", x), l6)
    x = csp("neck.13.csp", x, 256, 1, False)
    l14 = x = m.conv("neck.14.conv", x, 128, 1, pad=0)
    l16 = x = cat(m.upsample2x("neck.15.upsample", x), l4)
    assert l16 == (256, 48, 80), l16

    # Detection head: PAN (17-23) and Detect (24) on three scales.
    p3 = x = csp("det_head.17.csp", l16, 128, 1, False)
    x = cat(m.conv("det_head.18.conv", x, 128, 3, stride=2), l14)
    p4 = x = csp("det_head.20.csp", x, 256, 1, False)
    x = cat(m.conv("det_head.21.conv", x, 256, 3, stride=2), l10)
    p5 = csp("det_head.23.csp", x, 512, 1, False)
    na, no = 3, 1 + 5  # anchors per cell, outputs per anchor (1 class)
    for lvl, f in (("p3", p3), ("p4", p4), ("p5", p5)):
        y = m.conv("det_head.24.detect.%s.conv1x1" % lvl, f, na * no, 1, pad=0)
        n = y[0] * y[1] * y[2]
        m.eltwise("det_head.24.detect.%s.decode" % lvl, n, FL_DECODE, 2 * n)

    # The two segmentation heads have the same layout (25-33 and 34-42).
    for head, base in (("da_seg_head", 25), ("ll_seg_head", 34)):
        def name(i, what):
            return "%s.%d.%s" % (head, base + i, what)
        x = m.conv(name(0, "conv"), l16, 128, 3)
        x = m.upsample2x(name(1, "upsample"), x)
        x = csp(name(2, "csp"), x, 64, 1, False)
        x = m.conv(name(3, "conv"), x, 32, 3)
        x = m.upsample2x(name(4, "upsample"), x)
        x = m.conv(name(5, "conv"), x, 16, 3)
        x = csp(name(6, "csp"), x, 8, 1, False)
        x = m.upsample2x(name(7, "upsample"), x)
        x = m.conv(name(8, "conv"), x, 2, 3)
        assert x == (2, 384, 640), x
        n = x[0] * x[1] * x[2]
        m.eltwise("%s.sigmoid" % head, n, FL_SIGMOID, 2 * n)
    return m


# ======================================================================================
# BERT-base (Devlin et al. 2019), sequence length 128: hidden 768, 12 layers, 12 heads
# of 64, FFN 3072, vocabulary 30522, 512 positions, 2 token types.
# ======================================================================================
def bert_base():
    m = Model("bert_base", "BERT-base uncased (Devlin et al. 2019), sequence length 128, batch 1; "
                           "fused QKV GEMM, GELU and tanh in GEMM epilogues, add+layernorm "
                           "one kernel; params counts full embedding tables")
    seq, hid, heads, ffn, layers = 128, 768, 12, 3072, 12
    vocab, positions, types = 30522, 512, 2
    dh = hid // heads
    # Embeddings: word rows are gathered per token (activation bytes, they scale with the
    # batch); the first SEQ position rows, the token-type table and the layernorm are
    # read as weights. The unread part of the tables counts only towards `params`.
    m.rowwise("embeddings.lookup_add_layernorm", seq, hid, FL_EMBED,
              a_elems=2 * seq + seq * hid + seq * hid,
              w_elems=seq * hid + types * hid + 2 * hid)
    m.unread_params = vocab * hid + (positions - seq) * hid
    for li in range(layers):
        p = "encoder.%d." % li
        m.gemm(p + "attn.qkv_gemm", seq, 3 * hid, hid, hid * 3 * hid + 3 * hid,
               seq * hid + seq * 3 * hid)
        m.gemm(p + "attn.score_gemm", seq, seq, dh, 0, 2 * seq * hid + heads * seq * seq,
               batch=heads)
        m.rowwise(p + "attn.softmax", heads * seq, seq, FL_SOFTMAX,
                  a_elems=2 * heads * seq * seq + seq)
        m.gemm(p + "attn.context_gemm", seq, dh, seq, 0, heads * seq * seq + 2 * seq * hid,
               batch=heads)
        m.gemm(p + "attn.out_gemm", seq, hid, hid, hid * hid + hid, 2 * seq * hid)
        m.rowwise(p + "attn.add_layernorm", seq, hid, FL_LAYERNORM, a_elems=3 * seq * hid,
                  w_elems=2 * hid)
        m.gemm(p + "ffn.up_gemm_gelu", seq, ffn, hid, hid * ffn + ffn, seq * hid + seq * ffn)
        m.gemm(p + "ffn.down_gemm", seq, hid, ffn, ffn * hid + hid, seq * ffn + seq * hid)
        m.rowwise(p + "ffn.add_layernorm", seq, hid, FL_LAYERNORM, a_elems=3 * seq * hid,
                  w_elems=2 * hid)
    m.gemm("pooler.dense_tanh", 1, hid, hid, hid * hid + hid, 2 * hid)
    return m


MODELS = [
    lambda: resnet("resnet18", False, (2, 2, 2, 2)),
    lambda: resnet("resnet34", False, (3, 4, 6, 3)),
    lambda: resnet("resnet50", True, (3, 4, 6, 3)),
    inception_v1,
    inception_v2,
    inception_v3,
    mobilenet_v1,
    mobilenet_v2,
    mobilenet_v3,
    yolop,
    bert_base,
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if a file differs from what would be written")
    ap.add_argument("--summary", action="store_true", help="print per-model totals")
    ap.add_argument("--dir", default=os.path.dirname(os.path.abspath(__file__)),
                    help="output folder (default: the folder of this script)")
    args = ap.parse_args()

    models = [build() for build in MODELS]
    bad = []
    for m in models:
        path = os.path.join(args.dir, m.name + ".model")
        text = m.render()
        if args.check:
            try:
                with open(path, encoding="utf-8") as f:
                    if f.read() != text:
                        bad.append(path + ": differs from the generator's output")
            except FileNotFoundError:
                bad.append(path + ": missing")
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        if args.summary:
            flops, wbytes, abytes = m.totals()
            print("%-13s %4d ops  %8.3f GFLOPs  %7.3f GMACs  %8.3f M params (%8.3f M read)  "
                  "%7.1f MB act" % (m.name, len(m.ops), flops / 1e9, flops / 2e9,
                                    m.params() / 1e6, wbytes / F32 / 1e6, abytes / 1e6))
    if args.check:
        known = {m.name + ".model" for m in models}
        for f in sorted(os.listdir(args.dir)):
            if f.endswith(".model") and f not in known:
                bad.append(os.path.join(args.dir, f) + ": not made by the generator")
        for b in bad:
            print("gen_models: " + b, file=sys.stderr)
        if bad:
            print("gen_models: run 'python3 sim/models/gen_models.py' to regenerate",
                  file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
