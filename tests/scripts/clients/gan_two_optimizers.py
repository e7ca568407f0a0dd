"""A GAN in the style of the PyTorch examples' DCGAN: two models, two optimizers stepped each
iteration, a DataLoader, the epoch count in --niter."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--niter", type=int, default=3, help="number of epochs to train for")
parser.add_argument("--samples", type=int, default=1024)
parser.add_argument("--hidden", type=int, default=256)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
real = torch.randn(args.samples, 64)
loader = DataLoader(TensorDataset(real), batch_size=32, shuffle=True)
netG = torch.nn.Sequential(torch.nn.Linear(16, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 64))
netD = torch.nn.Sequential(torch.nn.Linear(64, args.hidden), torch.nn.LeakyReLU(0.2), torch.nn.Linear(args.hidden, 1))
criterion = torch.nn.BCEWithLogitsLoss()
optD = torch.optim.Adam(netD.parameters(), lr=2e-4)
optG = torch.optim.Adam(netG.parameters(), lr=2e-4)
for epoch in range(args.niter):
    for (batch,) in loader:
        netD.zero_grad()
        noise = torch.randn(batch.size(0), 16)
        fake = netG(noise)
        errD = criterion(netD(batch), torch.ones(batch.size(0), 1)) + \
            criterion(netD(fake.detach()), torch.zeros(batch.size(0), 1))
        errD.backward()
        optD.step()
        netG.zero_grad()
        errG = criterion(netD(fake), torch.ones(batch.size(0), 1))
        errG.backward()
        optG.step()
    print(f"epoch {epoch} D {errD.item():.3f} G {errG.item():.3f}", flush=True)
