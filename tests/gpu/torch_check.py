# Real-GPU check of the shim with PyTorch: a small conv net and a matmul chain run on the GPU;
# prints a checksum of the outputs (compared with and without the shim by run.sh) and the
# number of forward passes.
import sys
import torch

torch.manual_seed(0)
dev = "cuda"
net = torch.nn.Sequential(
    torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10),
).to(dev).eval()
x = torch.randn(8, 3, 64, 64, device=dev)
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 20
acc = torch.zeros(10, device=dev)
with torch.no_grad():
    for _ in range(iters):
        acc += net(x).sum(0)
        m = torch.randn(256, 256, device=dev, generator=None)
        acc[0] += (m @ m).trace() * 0
torch.cuda.synchronize()
print("checksum %.6f" % acc.double().sum().item())
print("iterations %d" % iters)
