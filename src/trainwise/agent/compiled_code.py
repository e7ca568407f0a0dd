"""Module hooks that torch.compile never sees.

A hook dynamo traces becomes part of the compiled code: its `time.perf_counter` breaks the graph (an error
under `fullgraph=True`), its reads of the recorder's state become guards that recompile the model, and
removing it changes the module-hook dictionaries dynamo guards on, so the next call recompiles again. The
profiler must not change the job, so the agent's hooks return at once while dynamo traces them (compiled
code then holds nothing of them) and, once a frame was compiled, stay registered but inert instead of
being removed. torch.compile's warning that global module hooks exist is then the agent's doing alone, and
is not shown while every global hook is the agent's. Once dynamo is imported, trainwise's functions are marked
for it to run as plain Python, never compiled as frames of their own; and the profile records what
torch.compile did (seconds compiling, graphs, inductor cache hits and misses).
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable

from trainwise.agent.import_watch import watch_import


def compiled_in_process() -> bool:
    """torch.compile has compiled a frame in this process (its guards may then cover module hooks)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return False
    try:
        return bool(utils.counters["frames"]["total"] or utils.counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - an unknown torch: assume it compiles
        return True


def tracing_check(torch: Any) -> Callable[[], bool]:
    """torch's "is dynamo tracing this?" (constant True inside a traced frame, False when run eagerly)."""
    for owner, name in ((getattr(torch, "compiler", None), "is_compiling"), (getattr(torch, "_utils", None), "is_compiling")):
        check = getattr(owner, name, None)
        if callable(check):
            return check
    return lambda: False  # a torch without torch.compile


class CompiledCodeSafeHook:
    """A module hook for `register_*_hook`: `hook`'s result when run eagerly, nothing while dynamo traces
    it, and nothing once `retire()`d. `handle` (set by the caller) is torch's RemovableHandle."""

    def __init__(self, torch: Any, hook: Callable[..., Any]) -> None:
        self._is_compiling = tracing_check(torch)
        self._hook = hook
        self.retired = False
        self.handle: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # the tracing check first: traced, it folds to True and `retired` is never read (nor guarded on)
        if self._is_compiling() or self.retired:
            return None
        return self._hook(*args, **kwargs)

    def retire(self) -> None:
        self.retired = True

    def remove(self) -> None:
        """Take the hook off; after a compile it stays registered, inert (removing it would recompile)."""
        if compiled_in_process():
            self.retired = True
        else:
            self.detach()

    def detach(self) -> None:
        """Take the hook off whatever was compiled (`torch.save` of the module must not pickle it; a hook kept
        beside a module compiled in place is not pickled and comes off without a recompile)."""
        self.retired = True
        if self.handle is not None:
            self.handle.remove()
            self.handle = None


def with_agent_hooks_eager(torch: Any, module: Any, compiled_call: Callable[..., Any]) -> Callable[..., Any]:
    """`module.compile()` compiles the module's whole `_call_impl`, hooks included: the agent's hooks (global or
    on this module) then only ever run traced, as nothing. This calls them eagerly around the compiled call
    (the job's own hooks stay where torch put them). The agent's later hooks on this module go in
    `call.agent_pre_hooks`, not in the module's hook table, whose change would recompile it."""
    hooks = torch.nn.modules.module

    def call(*args: Any, **kwargs: Any) -> Any:
        for table in (hooks._global_forward_pre_hooks, module._forward_pre_hooks):
            for hook in list(table.values()):
                if isinstance(hook, CompiledCodeSafeHook):
                    hook(module, args)
        for hook in list(call.agent_pre_hooks):
            hook(module, args)
        output = compiled_call(*args, **kwargs)
        for table, with_kwargs in ((hooks._global_forward_hooks, hooks._global_forward_hooks_with_kwargs),
                                   (module._forward_hooks, module._forward_hooks_with_kwargs)):
            for key, hook in list(table.items()):
                if isinstance(hook, CompiledCodeSafeHook):
                    hook(module, args, kwargs, output) if with_kwargs.get(key) else hook(module, args, output)
        return output

    call.agent_pre_hooks = []  # type: ignore[attr-defined]
    return call


class _SideTableHandle:
    def __init__(self, table: list, hook: Any) -> None:
        self.table, self.hook = table, hook

    def remove(self) -> None:
        if self.hook in self.table:
            self.table.remove(self.hook)


def register_module_pre_hook(torch: Any, module: Any, hook: Callable[..., Any]) -> CompiledCodeSafeHook:
    """`hook(module, args)` before each call of `module`, safe for compiled code; on a module compiled in place
    (`module.compile()`) it is kept beside the module, not in its hook table (a change there recompiles it)."""
    safe = CompiledCodeSafeHook(torch, hook)
    side_table = getattr(getattr(module, "_compiled_call_impl", None), "agent_pre_hooks", None)
    if side_table is not None:
        side_table.append(safe)
        safe.handle = _SideTableHandle(side_table, safe)
    else:
        safe.handle = module.register_forward_pre_hook(safe)
    return safe


def register_hook(torch: Any, register: Callable[..., Any], hook: Callable[..., Any], **options: Any) -> CompiledCodeSafeHook:
    """`register(wrapped hook, **options)` (a `register_*_hook` of torch) with `hook` made safe: the returned
    object's remove() takes it off (or retires it after a compile)."""
    safe = CompiledCodeSafeHook(torch, hook)
    safe.handle = register(safe, **options)
    return safe


GLOBAL_HOOKS_WARNING = "Using `torch.compile(module)` when there are global hooks"
_GLOBAL_HOOK_DICTS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
                      "_global_backward_hooks")


def only_agent_global_hooks(torch: Any) -> bool:
    """Every global module hook registered in this process is the agent's."""
    hooks = torch.nn.modules.module
    return all(isinstance(hook, CompiledCodeSafeHook)
               for name in _GLOBAL_HOOK_DICTS for hook in getattr(hooks, name, {}).values())


def agent_caused_warning(torch: Any) -> Callable[[Any], bool]:
    """A `warning_origin.suppress` predicate: torch.compile's global-hooks warning while the hooks are the agent's."""
    def caused(message: Any) -> bool:
        return str(message).startswith(GLOBAL_HOOKS_WARNING) and only_agent_global_hooks(torch)
    return caused


# dynamo's compile-time records (torch 2.x): the forward's whole compile, and the backward's, compiled at the first
# backward pass
COMPILE_TIME_KEYS = ("_compile.compile_inner", "compile_fx.<locals>.bw_compiler")
# inductor's compile of each graph (code generation and the C++/Triton builds): what a cache hit skips
CODEGEN_TIME_KEY = "compile_fx_inner"


def compile_summary() -> dict | None:
    """What torch.compile did in this process so far: seconds compiling, graphs, inductor's FX-graph cache hits
    and misses (a miss compiles code a later run on this machine finds in the cache). None when nothing compiled."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    try:
        graphs = int(utils.counters["stats"]["unique_graphs"])
        if graphs == 0:
            return None
        metrics = getattr(utils, "compilation_time_metrics", {})
        times = [t for key in COMPILE_TIME_KEYS for t in metrics.get(key, [])]
        inductor = utils.counters["inductor"]
        codegen = metrics.get(CODEGEN_TIME_KEY)
        return {"compile_s": float(sum(times)) if times else None, "graphs": graphs,
                "fx_cache_hits": int(inductor["fxgraph_cache_hit"]), "fx_cache_misses": int(inductor["fxgraph_cache_miss"]),
                "codegen_s": float(sum(codegen)) if codegen else None}
    except Exception:  # noqa: BLE001 - another torch keeps them elsewhere: nothing to say
        return None


def run_eagerly_under_compile(codes: list[types.CodeType], recursive: bool = False) -> bool:
    """Tell dynamo never to compile these code objects as frames of their own (and, `recursive`, nothing they
    call): called from compiled code (after a graph break, or as a hook torch runs eagerly inside a compiled call)
    they run as plain Python, as trainwise's code must; what they call of torch's behaves as without trainwise.
    Inlining them into traced code is unchanged (the hooks above trace as nothing). dynamo's private API, tried:
    False where this torch has none."""
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy

        strategy = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP if recursive else FrameAction.DEFAULT)
        for code in codes:
            set_code_exec_strategy(code, strategy)
        return True
    except Exception:  # noqa: BLE001 - another torch: dynamo may compile them, as before
        return False


def trainwise_code_objects() -> list[types.CodeType]:
    """The code of every function of trainwise's modules loaded in this process (methods and nested functions
    too): what dynamo must never compile."""
    codes: list[types.CodeType] = []
    seen: set[int] = set()

    def add(code: types.CodeType) -> None:
        if id(code) in seen:
            return
        seen.add(id(code))
        codes.append(code)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                add(const)

    def add_function(value: Any) -> None:
        value = getattr(value, "__func__", value)  # staticmethod, classmethod
        code = getattr(value, "__code__", None)
        if isinstance(code, types.CodeType):
            add(code)
        elif isinstance(value, property):
            for accessor in (value.fget, value.fset, value.fdel):
                if accessor is not None:
                    add_function(accessor)

    for name, module in list(sys.modules.items()):
        if module is None or not (name == "trainwise" or name.startswith("trainwise.")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == name:
                for member in list(vars(value).values()):
                    add_function(member)
            elif getattr(value, "__module__", None) == name:
                add_function(value)
    return codes


def when_dynamo_imported(callback: Callable[[], None]) -> None:
    """`callback()` once torch.compile's dynamo is imported (now, if it is): most jobs never import it."""
    if "torch._dynamo.eval_frame" in sys.modules:
        callback()
    else:
        watch_import("torch._dynamo", callback)
