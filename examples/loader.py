"""A DataLoader with two worker processes. Traced, from examples/ (see README.md):

    python -m pytrace_cffi run --skip-imports -o loader.html loader.py
"""
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.001)                   # a slow read, in a worker process
        return torch.tensor([float(i * i)])


def main():
    model = torch.nn.Linear(1, 1)
    for batch in DataLoader(Squares(), batch_size=8, num_workers=2):
        model(batch).sum().backward()


if __name__ == "__main__":
    main()
