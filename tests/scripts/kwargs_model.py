"""A model called with keyword inputs, after a parameter-free nn.Module transform and beside a small
auxiliary module: the profiler must characterise the model (the module owning most parameters)."""
import torch

torch.manual_seed(0)
torch.set_num_threads(1)


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, 32)
        self.mix = torch.nn.Linear(32, 32)
        self.head = torch.nn.Linear(32, 3)

    def forward(self, input_ids, attention_mask=None):
        h = torch.relu(self.mix(self.embed(input_ids)))
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1)
        return self.head(h.mean(dim=1))


normalise = torch.nn.Identity()          # a transform module, called first, no parameters
aux = torch.nn.Linear(3, 1)              # a small auxiliary module, called after the model
model = Encoder()
optimizer = torch.optim.SGD(list(model.parameters()) + list(aux.parameters()), lr=0.1, momentum=0.9)
for step in range(60):
    ids = normalise(torch.randint(0, 100, (8, 12)))
    mask = torch.ones(8, 12)
    logits = model(input_ids=ids, attention_mask=mask)
    loss = torch.nn.functional.cross_entropy(logits, torch.randint(0, 3, (8,))) + aux(logits).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
