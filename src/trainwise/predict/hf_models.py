"""`hf:` model names: Hugging Face architectures rebuilt from their config, with random weights.

Nothing can be downloaded here and `transformers` is not a dependency, so the configs of a few
popular models are packaged (`data/hf_configs/*.json`, architecture fields as published on the
Hub, each citing its config.json) and the architectures are rebuilt in plain PyTorch with the same
operators, shapes and parameter counts as the `transformers` "eager" implementations:

- attention is `F.scaled_dot_product_attention` (transformers' default "sdpa" implementation; the
  tracer models it as one fused flash/memory-efficient kernel);
- BERT / RoBERTa / XLM-RoBERTa (post-LN encoder; token-type embeddings where the config has them),
  DistilBERT (encoder without token types), GPT-2 (pre-LN decoder, causal mask, tied LM head);
- heads: `mlm` (masked-LM: dense + GELU + LayerNorm + vocabulary projection tied to the word
  embeddings, on every position as Hugging Face computes it — the RoBERTa pre-training objective of
  Erben et al.), `mlm15` (the same head on the 15 % masked positions only, as optimised pre-training
  code does, e.g. NVIDIA's `--dense_seq_output`), `clm` (GPT-2), `qa` (SQuAD span start/end),
  `cls` (pooler + classifier).

`hf:<name>` accepts the packaged names with or without the Hub organisation (`hf:FacebookAI/roberta-base`)
or a path to any config.json of one of these model types.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from trainwise.errors import TrainwiseError

CONFIG_DIR = Path(__file__).with_name("data") / "hf_configs"
TASKS = ("mlm", "mlm15", "clm", "qa", "cls")
MASKED_FRACTION = 0.15  # "mlm15": the MLM head only on the masked 15 % (NVIDIA's --dense_seq_output pre-training)


def config_names() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def load_config(name: str) -> dict[str, Any]:
    text = name.strip()
    path = Path(text)
    if text.endswith(".json") and path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    short = text.split("/")[-1]
    candidate = CONFIG_DIR / f"{short}.json"
    if candidate.is_file():
        return json.loads(candidate.read_text(encoding="utf-8"))
    import difflib

    near = difflib.get_close_matches(short, config_names(), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join('hf:' + n for n in near)}?" if near else f"packaged: {', '.join(config_names())}"
    raise TrainwiseError(f"no packaged Hugging Face config {name!r} (nothing can be downloaded): {hint}; "
                         "or pass hf:/path/to/config.json")


def default_task(config: dict[str, Any]) -> str:
    return "clm" if config.get("model_type") == "gpt2" else "mlm"


def task_of(config: dict[str, Any], task: str | None) -> str:
    """The head to train: `task` (any case) when it is one of TASKS, else the config's default."""
    if task is None:
        return default_task(config)
    name = task.strip().lower()
    if name not in TASKS:
        import difflib

        near = difflib.get_close_matches(name, TASKS, n=1, cutoff=0.5)
        hint = f"did you mean {near[0]}? " if near else ""
        raise TrainwiseError(f"unknown task {task!r} for an hf: model (--task): {hint}use one of {', '.join(TASKS)}")
    return name


def max_seq_len(config: dict[str, Any]) -> int | None:
    """The longest sequence the config's position embeddings cover (None when it names no table size)."""
    kind = config.get("model_type", "bert")
    rows = config.get("n_positions", config.get("n_ctx")) if kind == "gpt2" else config.get("max_position_embeddings")
    try:
        rows = int(rows)
        if kind in ("roberta", "xlm-roberta"):
            # RoBERTa numbers a token's position from pad_token_id + 1 on (transformers'
            # create_position_ids_from_input_ids): 514 rows hold 512 tokens, a 513th is out of range
            rows -= int(config.get("pad_token_id", 1)) + 1
    except (TypeError, ValueError):  # missing or malformed: building the model reports it
        return None
    return rows


def check_seq_len(model_name: str, config: dict[str, Any], seq_len: int) -> None:
    """Refuse a sequence longer than the model has positions for: a real run fails on it (an index
    error, a device-side assert on a GPU) while a trace on the meta device would price it without a word."""
    limit = max_seq_len(config)
    if limit is not None and seq_len > limit:
        raise TrainwiseError(f"--seq-len {seq_len} is longer than {model_name}'s {limit} positions: "
                             f"use --seq-len {limit} or less")


def _dims(config: dict[str, Any]) -> dict[str, Any]:
    kind = config.get("model_type", "bert")
    if kind == "gpt2":
        return {"hidden": config["n_embd"], "layers": config["n_layer"], "heads": config["n_head"],
                "ffn": config.get("n_inner") or 4 * config["n_embd"], "positions": config["n_positions"],
                "vocab": config["vocab_size"], "types": 0, "eps": config.get("layer_norm_epsilon", 1e-5),
                "dropout": config.get("resid_pdrop", 0.1), "attn_dropout": config.get("attn_pdrop", 0.1),
                "pre_ln": True, "causal": True}
    if kind == "distilbert":
        return {"hidden": config["dim"], "layers": config["n_layers"], "heads": config["n_heads"],
                "ffn": config["hidden_dim"], "positions": config["max_position_embeddings"], "vocab": config["vocab_size"],
                "types": 0, "eps": 1e-12, "dropout": config.get("dropout", 0.1),
                "attn_dropout": config.get("attention_dropout", 0.1), "pre_ln": False, "causal": False}
    if kind in ("bert", "roberta", "xlm-roberta"):
        return {"hidden": config["hidden_size"], "layers": config["num_hidden_layers"],
                "heads": config["num_attention_heads"], "ffn": config["intermediate_size"],
                "positions": config["max_position_embeddings"], "vocab": config["vocab_size"],
                "types": config.get("type_vocab_size", 0), "eps": config.get("layer_norm_eps", 1e-12),
                "dropout": config.get("hidden_dropout_prob", 0.1),
                "attn_dropout": config.get("attention_probs_dropout_prob", 0.1), "pre_ln": False, "causal": False}
    raise TrainwiseError(f"Hugging Face model type {kind!r} is not supported: bert, roberta, xlm-roberta, distilbert, gpt2")


def build(config: dict[str, Any], task: str | None = None) -> Any:
    """The model as an nn.Module (build it under `torch.device('meta')` to allocate nothing)."""
    import torch
    from torch import nn
    import torch.nn.functional as F

    task = task_of(config, task)
    d = _dims(config)
    h, heads = d["hidden"], d["heads"]
    head_dim = h // heads

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
            self.out = nn.Linear(h, h)
            self.drop = nn.Dropout(d["attn_dropout"])

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape

            def split(t: Any) -> Any:
                return t.view(b, s, heads, head_dim).transpose(1, 2)

            q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
            # transformers' default attention ("sdpa"): one fused kernel on a GPU
            ctx = F.scaled_dot_product_attention(q, k, v, dropout_p=d["attn_dropout"] if self.training else 0.0,
                                                 is_causal=d["causal"])
            return self.out(ctx.transpose(1, 2).reshape(b, s, h))

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = Attention()
            self.ln1 = nn.LayerNorm(h, eps=d["eps"])
            self.fc1, self.fc2 = nn.Linear(h, d["ffn"]), nn.Linear(d["ffn"], h)
            self.ln2 = nn.LayerNorm(h, eps=d["eps"])
            self.drop = nn.Dropout(d["dropout"])

        def forward(self, x: Any) -> Any:
            if d["pre_ln"]:
                x = x + self.drop(self.attention(self.ln1(x)))
                return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh")))
            x = self.ln1(x + self.drop(self.attention(x)))
            return self.ln2(x + self.drop(self.fc2(F.gelu(self.fc1(x)))))

    class Transformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding(d["vocab"], h)
            self.position = nn.Embedding(d["positions"], h)
            self.token_type = nn.Embedding(d["types"], h) if d["types"] else None
            self.emb_ln = None if d["pre_ln"] else nn.LayerNorm(h, eps=d["eps"])
            self.emb_drop = nn.Dropout(d["dropout"])
            self.layers = nn.ModuleList(Layer() for _ in range(d["layers"]))
            self.final_ln = nn.LayerNorm(h, eps=d["eps"]) if d["pre_ln"] else None
            if task in ("mlm", "mlm15"):
                self.transform = nn.Linear(h, h)
                self.transform_ln = nn.LayerNorm(h, eps=d["eps"])
                self.decoder_bias = nn.Parameter(torch.zeros(d["vocab"]))
            elif task == "qa":
                self.qa = nn.Linear(h, 2)
            elif task == "cls":
                self.pooler = nn.Linear(h, h)
                self.classifier = nn.Linear(h, 2)

        def forward(self, ids: Any) -> Any:
            b, s = ids.shape
            pos = torch.arange(s, device=ids.device).unsqueeze(0)
            x = self.word(ids) + self.position(pos)
            if self.token_type is not None:
                x = x + self.token_type(torch.zeros_like(ids))
            if self.emb_ln is not None:
                x = self.emb_ln(x)
            x = self.emb_drop(x)
            for layer in self.layers:
                x = layer(x)
            if self.final_ln is not None:
                x = self.final_ln(x)
            if task in ("mlm", "mlm15"):
                if task == "mlm15":
                    keep = max(1, round(s * MASKED_FRACTION))
                    x = x[:, :keep]  # the gathered masked positions (same cost as a gather)
                x = self.transform_ln(F.gelu(self.transform(x)))
                return F.linear(x, self.word.weight, self.decoder_bias)
            if task == "clm":
                return F.linear(x, self.word.weight)
            if task == "qa":
                return self.qa(x)
            return self.classifier(torch.tanh(self.pooler(x[:, 0])))

    return Transformer()


def loss_for(task: str) -> Callable[[Any], Any]:
    """The training loss of each head, on the traced output (targets are meta tensors)."""
    import torch
    import torch.nn.functional as F

    def _target(n: int, device: Any) -> Any:
        t = torch.empty(n, dtype=torch.long, device=device)
        return t if t.device.type == "meta" else t.zero_()

    def token_ce(logits: Any) -> Any:
        v = logits.shape[-1]
        return F.cross_entropy(logits.reshape(-1, v), _target(logits.shape[0] * logits.shape[1], logits.device))

    def span_ce(logits: Any) -> Any:
        start, end = logits[..., 0], logits[..., 1]
        target = _target(logits.shape[0], logits.device)
        return (F.cross_entropy(start, target) + F.cross_entropy(end, target)) / 2

    def cls_ce(logits: Any) -> Any:
        return F.cross_entropy(logits, _target(logits.shape[0], logits.device))

    return {"mlm": token_ce, "mlm15": token_ce, "clm": token_ce, "qa": span_ce, "cls": cls_ce}[task]
