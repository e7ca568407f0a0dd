"""An autoencoder whose script calls its encoder and decoder one after the other (never the module holding both),
with a DataLoader and one optimizer over both: the device model's step must hold both halves."""
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))  # 2,632

    def forward(self, x):
        return self.net(x)


class Decoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))  # 1,344

    def forward(self, z):
        return self.net(z)


class AutoEncoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder, self.decoder = Encoder(), Decoder()


model = AutoEncoder()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loader = DataLoader(TensorDataset(torch.randn(512, 32)), batch_size=16, shuffle=True)
for epoch in range(2):
    for (x,) in loader:
        optimizer.zero_grad()
        loss = (model.decoder(model.encoder(x)) - x).pow(2).mean()
        loss.backward()
        optimizer.step()
