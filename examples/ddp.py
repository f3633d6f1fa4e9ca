"""A tiny data-parallel training job for torchrun, on CPU (gloo). Traced, from
examples/ (see README.md):

    python -m pytrace_cffi run --skip-imports -o ddp.pftrace -m torch.distributed.run --standalone --nproc_per_node 2 ddp.py
"""
import torch
import torch.distributed as dist


def train_step(model, optimizer, batch):
    optimizer.zero_grad()
    model(batch).square().mean().backward()
    for p in model.parameters():            # what DistributedDataParallel does, by hand
        dist.all_reduce(p.grad)
    optimizer.step()


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(10):
        train_step(model, optimizer, torch.randn(16, 32))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
