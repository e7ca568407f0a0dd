"""The step tracer: what one training step of a model costs, operator by operator.

`characterisation.characterise_model` traces one full training step (forward, loss, backward; the optimizer
step is added analytically, see below) under a `TorchDispatchMode`, on the *meta* device by default,
so a model far too large for this machine's memory can be characterised at a realistic batch
size (ConvNeXt-Large at batch 64, RoBERTa-large at sequence 512) without allocating a byte of data.
Every ATen operator that reaches the dispatcher is recorded with

- its category (matmul / conv / attention / elementwise / reduction / normalisation / embedding /
  optimizer / copy; `other` for operators the device model has no rule for — listed as unsupported),
- its FLOPs (`torch.utils.flop_counter`'s formulas for matmuls, convolutions and attention, which
  count a multiply-add as 2 FLOPs; one FLOP per output element for elementwise and reductions),
- the bytes it reads and writes (tensor sizes; views are free and not recorded),
- the shapes and the dtype it computes in, and how well its matmul dimensions are aligned (tensor
  cores need multiples of 8 for 16-bit and 4 for TF32 operands).

Identical calls (same operator, shapes, dtype and phase — the 24 layers of BERT-large) are merged
into one record with a `count`, which keeps the characterisation small (a few hundred records).

Mixed precision. `torch.autocast` does nothing on the meta device, so AMP is *simulated* inside the
dispatch mode with autocast's own rules: matmuls and convolutions run in the low-precision dtype
(the fp32 master weights are cast once per forward and the cast is recorded as a `copy`), the
operators autocast forces to fp32 (softmax, log_softmax, layer/group norm, the losses, exp/log/pow)
get fp32 inputs, everything else runs in whatever dtype its inputs have (type promotion). Autograd
casts the fp16 weight gradients back to the fp32 parameters, and those casts are traced as they
happen on a GPU.

Optimizer. `optimizer.step()` on a GPU is a handful of multi-tensor (`foreach`/fused) kernels; on
meta/CPU tensors PyTorch would take the per-parameter loop instead, which would mislead the launch
count. The step is therefore modelled analytically from the parameter count: torch's default foreach
path streams every state tensor once per `torch._foreach_*` call (Adam: 7 calls, 72 bytes per fp32
parameter, `optimizers.FOREACH_TRAFFIC`, checked against the installed torch by the tests), a fused
optimizer (`fused=True`, a `<name>_fused` key) once (28 bytes, `optimizers.OPTIMIZER_STATE`).

Memory. The activation estimate is the set of distinct tensors autograd saves for backward
(`torch.autograd.graph.saved_tensors_hooks`), excluding parameters; the characterisation's
`memory_breakdown` adds weights, gradients, optimizer state, AMP weight copies, the DDP gradient
buckets and the largest backward temporaries. Units: bytes, FLOPs (not MACs). ResNet-50 at 224x224
is 4.1 GMACs = 8.2 GFLOPs forward.

Modules: `categories` (which kernel each ATen operator is, autocast's policy), `flops` (FLOPs, bytes
and alignment of one call), `dispatch` (the TorchDispatchMode recording every operator), `fused`
(the TorchFunctionMode: simulated autocast, fused attention and recurrent layers), `optimizers` (the
analytic optimizer step), `live` (what the recorder reads off the running job), `step` (the traced
step as plain fields; the profiler's entry point) and `characterisation` (the public entry points,
which return core's WorkloadCharacterisation, a pydantic model). All but `characterisation` import
only the standard library, torch and trainwise's leaf modules (the agent-side-stdlib contract in
.importlinter): they run inside the user's job, whose environment need hold nothing but torch.
"""
