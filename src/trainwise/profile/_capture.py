"""The model's first training call (input shapes, precision, memory format), the trace of one training
step on the meta device, and the host-level probe beside the sampled steps. A mixin of the recorder.
"""

from __future__ import annotations

import time
import warnings
import weakref

from trainwise.agent.compiled_code import compiled_in_process


class WorkloadCapture:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    def _capture_model_inputs(self, module, args, kwargs, output):
        # Runs for every module call until the first optimizer step (iteration 1, warm-up anyway);
        # its cost is observer time.
        started = time.perf_counter()
        try:
            key = id(module)
            torch = self._torch
            if key in self._seen_modules or not torch.is_grad_enabled():
                return None
            self._seen_modules.add(key)
            count = sum(p.numel() for p in module.parameters())
            if not count:
                return None
            from trainwise.agent.trace.live import batch_shapes_of, detect_memory_format, detect_precision

            if self.characterise:
                self._note_called_module(module, count, batch_shapes_of(args, kwargs))  # another model, maybe
            # a module holding as many as the model so far holds the same ones around it (post-hooks run inner
            # modules first): the outer one is the model (an Encoder, not its Sequential)
            if count < self._model_parameters:
                return None
            self._model_ref = weakref.ref(module)
            self._model_parameters = count
            if not self.characterise:
                return None

            device_type = "cpu"
            for p in module.parameters():
                device_type = p.device.type
                break
            self._model_inputs = batch_shapes_of(args, kwargs)
            self._model_precision = detect_precision(device_type if device_type in ("cuda", "cpu") else "cuda")
            self._model_memory_format = detect_memory_format(args)
        except Exception as exc:  # noqa: BLE001 - never break the user's training
            self.notes.append(f"model input capture failed: {exc}")
        finally:
            self.observer_s += time.perf_counter() - started
        return None

    def _stop_capturing(self) -> None:
        if self._shape_hook is not None:
            self._shape_hook.remove()
            self._shape_hook = None
            self._seen_modules.clear()

    def _characterise(self) -> None:
        """Trace one training step of the captured model on the meta device: once, after the second
        iteration of a sampled profile, at the end of a --full run."""
        if not self.characterise or self._characterise_tried:
            return
        self._characterise_tried = True
        started = time.perf_counter()
        # The trace's own forward and backward (on a meta-device copy) are no iteration and no region
        was_paused, self.paused = self.paused, True
        try:
            self._trace_workload()
        finally:
            self.paused = was_paused
            self.characterise_s = time.perf_counter() - started

    def _model_behind_compiled_code(self):
        """A model that runs only inside compiled code (torch.compile of a whole training step), where the hooks
        trace as nothing: the built module holding the most of the optimizer's parameters (all of its own among
        them), called with the first training batch's tensor. None when torch.compile did not run, or there is
        no optimizer or batch to go by."""
        optimizer = self._optimizer_ref() if self._optimizer_ref is not None else None
        if optimizer is None or self._first_batch_shapes is None or not compiled_in_process():
            return None
        trained = {id(p) for group in optimizer.param_groups for p in group["params"]}
        candidates = []
        for reference in self._built_modules:
            module = reference()
            if module is None or type(module).__module__.startswith("torch.fx"):  # gone, or a graph compile built
                continue
            own = [id(p) for p in module.parameters()]
            if own and all(key in trained for key in own):
                candidates.append((len(own), -sum(1 for _ in module.modules()), module))
        if not candidates:
            return None
        # the most parameters; of wrappers holding the same ones (torch.compile's, a LightningModule), the innermost
        best = max(candidates, key=lambda c: c[:2])[2]
        self._model_inputs = self._first_batch_shapes
        self.notes.append(f"the model ({type(best).__name__}) runs inside compiled code only, which trainwise's hooks do "
                          "not enter: characterised as the module holding the optimizer's parameters, called with the "
                          "first training batch (its first tensor, or its tensors by name)")
        return best

    def _probe_level(self, where: str) -> None:
        """Time the host-noise probe here, between two iterations (observer time): the host's level
        beside the sampled steps."""
        if not self.level_probe_s or not self.level_probe_socket or self._model_on_gpu():
            return
        started = time.perf_counter()
        try:
            # Probed by the launcher, in its own process: the probe's allocations and thread setting must not
            # change this job's allocator state (trainwise.profile.level_service says how they did).
            from trainwise.profile.level_service import remote_probe_level_s

            level_s = remote_probe_level_s(self.level_probe_socket, self.level_probe_s)
            self.level_probes.append({"where": where, "after_iteration": len(self.iterations), "level_s": level_s})
        except Exception as exc:  # noqa: BLE001 - a diagnostic must never lose the profile
            self.notes.append(f"host level probe failed: {exc}")
            self.level_probe_s = 0.0
        finally:
            self.level_probes_s += time.perf_counter() - started

    def _model_on_gpu(self) -> bool:
        """The model's parameters live on a GPU: a CPU level says nothing about its steps."""
        model = self._model_ref() if self._model_ref is not None else None
        try:
            return model is not None and next(model.parameters()).device.type != "cpu"
        except StopIteration:
            return False

    def _trace_workload(self) -> None:
        self._stop_capturing()
        model = self._model_ref() if self._model_ref is not None else None
        if model is None or self._model_inputs is None:
            model = self._model_behind_compiled_code()
        if model is None or self._model_inputs is None:
            self.notes.append("workload characterisation skipped: no model forward pass was seen")
            return
        try:
            from trainwise.agent.trace.live import unwrap_model
            from trainwise.agent.trace.optimizers import optimizer_name_of
            from trainwise.agent.trace.step import trace_step_fields

            optimizer = self._optimizer_ref() if self._optimizer_ref is not None else None
            # No optimizer object, iterations from autograd: a hand-written update, p -= lr * grad (SGD's traffic)
            fallback = "sgd" if self._autograd_noted else "sgd_momentum"
            name = self.config.get("workload") or type(unwrap_model(model)).__name__  # not torch.compile's wrapper
            # The reason a trace fails is the profile's note, not a warning in the middle of the job's output.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                # the optimizer stepping the model's parameters (a GAN's first to step may be the other model's)
                optimizer_name = self._optimizer_name_for(unwrap_model(model)) or (
                    optimizer_name_of(optimizer) if optimizer is not None else fallback)
                char = trace_step_fields(model, self._model_inputs, precision=self._model_precision,
                                         optimizer_name=optimizer_name,
                                         model_name=name, memory_format=self._model_memory_format)
            if char is None:
                why = next((str(w.message).removeprefix("trainwise: workload characterisation skipped: ")
                            for w in caught if issubclass(w.category, RuntimeWarning)), "the model could not be traced")
                self.notes.append(f"workload characterisation skipped: {why}")
                return
            self.characterisation = char  # plain fields (no pydantic in the job's environment); the reader validates them
            self.other_models_traced = self._trace_other_models(trace_step_fields)
        except Exception as exc:  # noqa: BLE001 - a profile must survive a failed characterisation
            self.notes.append(f"workload characterisation skipped: {exc}")
