"""The two models of the DDP anchor (../shared/anchors/ddp_fashion_mnist.py), for
the bench programs that reproduce its step: the CNN (conv32-conv64-fc128, 1.2 M
parameters) and the communication-heavy MLP (784-4096-4096-10, 20.3 M)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.f1, self.f2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c2(F.relu(self.c1(x)))), 2)
        return self.f2(F.relu(self.f1(torch.flatten(x, 1))))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.f1, self.f2, self.f3 = nn.Linear(784, 4096), nn.Linear(4096, 4096), nn.Linear(4096, 10)

    def forward(self, x):
        return self.f3(F.relu(self.f2(F.relu(self.f1(torch.flatten(x, 1))))))


def model(kind):
    """kind "mlp" or "cnn" (anything else is the CNN, as in the anchor)."""
    return MLP() if kind == "mlp" else Net()
