"""The TorchDispatchMode that records every ATen operator of a traced step (category, FLOPs, bytes,
shapes, dtype), merging identical calls into one record."""

from __future__ import annotations

from typing import Any

from trainwise.agent.trace.categories import FREE_OPS, LOW_DTYPES, category_of
from trainwise.agent.trace.flops import alignment, attention_flops, conv_flops, tensor_bytes


class Tracer:
    """Holds the state of one trace; the TorchDispatchMode subclass is built lazily (torch import)."""

    def __init__(self, precision: str) -> None:
        self.precision = precision
        self.low_dtype_name = LOW_DTYPES.get(precision)
        self.phase: str = "forward"
        self.records: dict[tuple, dict[str, Any]] = {}
        self.unsupported: dict[str, int] = {}
        self.cast_cache: dict[int, Any] = {}
        self.cast_keepalive: list[Any] = []
        self.amp_weight_copy_bytes = 0
        self.param_ids: set[int] = set()
        self.peak_temporary_bytes = 0

    # -- bookkeeping --
    def add(self, op: str, category: str, flops: float, read: float, written: float, dtype: str,
            shapes: list[list[int]], align: int = 16, groups: int = 1, phase: str | None = None) -> None:
        phase = phase or self.phase
        key = (op, category, phase, dtype, tuple(tuple(s) for s in shapes), align, groups, round(flops), round(read),
               round(written))
        entry = self.records.get(key)
        if entry is None:
            self.records[key] = {"op": op, "category": category, "phase": phase, "count": 1, "flops": float(flops),
                                 "bytes_read": float(read), "bytes_written": float(written), "dtype": dtype,
                                 "shapes": [list(s) for s in shapes], "align": align, "groups": groups}
        else:
            entry["count"] += 1


# Replay repeated operator calls from a cache (see make_dispatch_mode); False traces every call afresh
# (the reference the tests compare the cache against).
DISPATCH_CACHE = True


def make_dispatch_mode(tracer: Tracer):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    meta = torch.device("meta")
    # A recurrent layer or a stack of identical blocks dispatches the same operator on the same shapes
    # thousands of times (an LSTM over 300 steps: ~19,000 calls), and each meta kernel is a Python
    # reference implementation (~0.3 ms). For a functional operator on meta tensors the output's
    # metadata and the operator's cost depend only on the inputs' metadata and the other arguments, so
    # both are computed once per distinct call and replayed: the same records, several times faster.
    cache: dict[tuple, tuple] = {}
    kinds: dict[Any, str | None] = {}
    use_cache = DISPATCH_CACHE

    def cache_kind(func) -> str | None:
        """"functional" (fresh tensor outputs), "inplace" (returns its mutated first argument), or None."""
        if func in kinds:
            return kinds[func]
        schema = func._schema
        returns, arguments = list(schema.returns), list(schema.arguments)
        kind = None
        if not schema.is_mutable and returns and all(r.alias_info is None for r in returns) \
                and all(str(r.type) in ("Tensor", "Tensor[]") for r in returns):
            kind = "functional"
        elif len(returns) == 1 and returns[0].alias_info is not None and arguments \
                and arguments[0].alias_info is not None and arguments[0].alias_info.is_write \
                and returns[0].alias_info.before_set == arguments[0].alias_info.before_set \
                and not any(a.alias_info is not None and a.alias_info.is_write for a in arguments[1:]):
            kind = "inplace"
        kinds[func] = kind
        return kind

    def describe(value):
        """A hashable description of one argument, or raise TypeError (the call is not cached)."""
        if isinstance(value, torch.Tensor):
            if value.device != meta or value.is_sparse or value.is_nested:
                raise TypeError("not a dense meta tensor")
            # Not the storage offset (neither an output's metadata nor an operator's cost depends on it:
            # an LSTM's per-step slices differ only there), but the storage size: bytes read are capped
            # by it (an expanded tensor reads only its storage).
            return ("T", tuple(value.shape), value.stride(), value.dtype, value.untyped_storage().nbytes())
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, tuple(describe(v) for v in value))
        if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device, torch.layout,
                                               torch.memory_format)):
            return (type(value).__name__, value)
        raise TypeError(f"unhashable argument {type(value).__name__}")

    def outputs_meta(out):
        if isinstance(out, torch.Tensor):
            if out.device != meta:
                raise TypeError("output not on meta")
            spec = ("T", tuple(out.shape), out.stride(), out.dtype)
            # Replayed outputs are fresh tensors: cache only outputs such a tensor reproduces exactly.
            if out.storage_offset() != 0 or rebuild(spec).untyped_storage().nbytes() != out.untyped_storage().nbytes():
                raise TypeError("output is not a fresh tensor")
            return spec
        if isinstance(out, (list, tuple)):
            return (type(out).__name__, tuple(outputs_meta(o) for o in out))
        raise TypeError("output is not a tensor")

    def rebuild(spec):
        if spec[0] == "T":
            _, shape, stride, dtype = spec
            return torch.empty_strided(shape, stride, dtype=dtype, device=meta)
        items = [rebuild(s) for s in spec[1]]
        return tuple(items) if spec[0] == "tuple" else items

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: C901 - one dispatcher
            kwargs = kwargs or {}
            packet = func._overloadpacket
            name = packet.__name__ if hasattr(packet, "__name__") else str(packet).split(".")[-1]
            name = str(name).split(".")[-1]
            if name in FREE_OPS or func.is_view:
                return func(*args, **kwargs)
            kind = cache_kind(func) if use_cache else None
            key = None
            if kind is not None:
                try:
                    key = (func, describe(args), describe(tuple(sorted(kwargs.items()))))
                except TypeError:
                    key = None
            hit = cache.get(key) if key is not None else None
            if hit is not None:
                out_spec, added = hit
                self._replay(added)
                return args[0] if kind == "inplace" else rebuild(out_spec)
            # An in-place operator's argument, before the call (to check it kept its metadata).
            before = (describe(args[0]), args[0].storage_offset()) if kind == "inplace" and key is not None else None
            out = func(*args, **kwargs)
            added: list[tuple] = []
            try:
                self._record(func, name, args, kwargs, out, added)
            except Exception as exc:  # a cost rule must never break the trace
                tracer.unsupported[f"{func} (cost rule failed: {type(exc).__name__})"] = tracer.unsupported.get(str(func), 0) + 1
                key = None
            if key is not None:
                try:
                    if kind == "inplace":
                        # Only an in-place operator that left its argument's metadata alone (not resize_,
                        # squeeze_, as_strided_ …) can be replayed by returning the argument.
                        if out is not args[0] or before != (describe(args[0]), args[0].storage_offset()):
                            raise TypeError("in-place operator changed its argument's metadata")
                        cache[key] = (None, added)
                    else:
                        cache[key] = (outputs_meta(out), added)
                except TypeError:
                    pass
            return out

        def _replay(self, added: list[tuple]) -> None:
            for kind, payload in added:
                if kind == "unsupported":
                    tracer.unsupported[payload] = tracer.unsupported.get(payload, 0) + 1
                else:
                    tracer.add(*payload)
                    if tracer.phase == "backward":
                        tracer.peak_temporary_bytes = max(tracer.peak_temporary_bytes, int(payload[4]))

        def _record(self, func, name, args, kwargs, out, added: list[tuple]) -> None:
            category = category_of(name, func)
            flat_in, _ = tree_flatten((args, kwargs))
            tensors_in = [t for t in flat_in if isinstance(t, torch.Tensor)]
            flat_out, _ = tree_flatten(out)
            tensors_out = [t for t in flat_out if isinstance(t, torch.Tensor)]
            mutable = bool(func._schema.is_mutable) or name.endswith("_")
            read = sum(tensor_bytes(t) for t in tensors_in)
            written = sum(tensor_bytes(t) for t in tensors_out)
            if mutable and not tensors_out:
                written = tensor_bytes(tensors_in[0]) if tensors_in else 0.0
            floats = [t for t in tensors_in if t.is_floating_point()]
            dtype = str((floats[0] if floats else (tensors_out[0] if tensors_out else None)).dtype).replace("torch.", "") \
                if (floats or tensors_out) else "none"
            shapes = [list(t.shape) for t in tensors_in[:3]]
            flops = 0.0
            align = 16
            groups = 1
            if category in ("matmul", "conv", "attention"):
                formula = flop_registry.get(packet_of(func))
                if category == "conv":
                    flops = conv_flops(name, args, tensors_out)
                elif formula is not None:
                    flops = float(formula(*args, **kwargs, out_val=out))
                elif category == "attention":
                    flops = attention_flops(name, tensors_in)
                else:
                    added.append(("unsupported", name))
                align, groups = alignment(name, category, args, tensors_in)
            elif category == "other":
                added.append(("unsupported", name))
                flops = float(sum(t.numel() for t in tensors_out))
            else:
                flops = float(sum(t.numel() for t in tensors_out)) if category != "copy" else 0.0
            added.append(("add", (str(func), category, flops, read, written, dtype, shapes, align, groups)))
            self._replay(added)

    def packet_of(func):
        return func._overloadpacket

    return _Mode()
