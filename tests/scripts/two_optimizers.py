"""A GAN-style loop: two models, two optimizers, two optimizer steps per batch."""
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(256, 8)), batch_size=16, shuffle=True)
generator = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))  # 424 parameters
critic = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))  # 161 parameters
critic_optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3)
generator_optimizer = torch.optim.SGD(generator.parameters(), lr=1e-3)
for epoch in range(2):
    for (real,) in loader:
        fake = generator(torch.randn(len(real), 4))
        critic_optimizer.zero_grad()
        (critic(fake.detach()).mean() - critic(real).mean()).backward()
        critic_optimizer.step()
        generator_optimizer.zero_grad()
        (-critic(fake).mean()).backward()
        generator_optimizer.step()
