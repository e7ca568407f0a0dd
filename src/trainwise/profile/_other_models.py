"""Models that train beside the largest one: a GAN's discriminator, an encoder and a decoder called apart, a
separate trained head. The first iteration's calls (until the first optimizer step) are kept per module with
their input shapes; at that step the largest disjoint modules besides the model are counted (how often the job
calls them in the next iteration, one pre-hook each), and the trace covers each one an optimizer steps, as many
times as it was called. A mixin of the recorder.
"""

from __future__ import annotations

import weakref

from trainwise.agent.compiled_code import register_module_pre_hook

MAX_OTHER_MODELS = 3
MAX_CALLED_MODULES = 20_000  # a model of more modules than this is kept to its first (its largest is the model)


class OtherModels:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    def _init_other_models(self) -> None:
        self._called_modules: list[tuple] = []  # (weakref, parameters, input shapes) of the first iteration's calls
        self._other_counters: list[tuple] = []  # (weakref, hook, [calls], input shapes) while counted
        self._other_models: list[tuple] = []  # (weakref, input shapes, calls per iteration) once counted
        self._stepped_optimizers: list = []  # weakrefs to every optimizer that stepped

    def _note_called_module(self, module, count: int, shapes) -> None:
        if len(self._called_modules) < MAX_CALLED_MODULES:
            self._called_modules.append((weakref.ref(module), count, shapes))

    def _count_other_models(self) -> None:
        """At the first optimizer step: the largest modules called in the first iteration that share no parameter
        with the model or with each other, counted from here to the iteration after (one pre-hook each)."""
        called, self._called_modules = self._called_modules, []
        model = self._model_ref() if self._model_ref is not None else None
        if model is None or not self.characterise or self.framework is not None or self.explicit_steps:
            return
        covered = {id(p) for p in model.parameters()}
        torch = self._torch
        # the most parameters first; of modules holding the same ones, the outermost (called last: post-hooks)
        ranked = sorted(enumerate(called), key=lambda item: (-item[1][1], -item[0]))
        for reference, _, shapes in (entry for _, entry in ranked):
            module = reference()
            first = next(module.parameters(), None) if module is not None else None
            if first is None or id(first) in covered or len(self._other_counters) >= MAX_OTHER_MODELS:
                continue
            covered.update(id(p) for p in module.parameters())
            counter = [0]

            def count_call(called_module, args, counter=counter):
                if torch.is_grad_enabled() and called_module.training:
                    counter[0] += 1
                return None

            self._other_counters.append((reference, register_module_pre_hook(torch, module, count_call), counter, shapes))

    def _stop_counting_other_models(self) -> None:
        """The iteration after the first optimizer step has ended (or the job is being traced): each module's calls
        in it, kept for the ones an optimizer steps."""
        counters, self._other_counters = self._other_counters, []
        for reference, hook, counter, shapes in counters:
            hook.remove()
            module = reference()
            first = next(module.parameters(), None) if module is not None else None
            if first is not None and counter[0] > 0 and id(first) in self._described_parameters:
                self._other_models.append((reference, shapes, counter[0]))

    def _optimizer_name_for(self, module) -> str | None:
        from trainwise.agent.trace.optimizers import optimizer_name_of

        first = next(module.parameters(), None)
        for reference in self._stepped_optimizers:
            optimizer = reference()
            if optimizer is not None and any(p is first for group in optimizer.param_groups for p in group["params"]):
                return optimizer_name_of(optimizer)
        return None

    def _trace_other_models(self, trace_step_fields) -> list[dict]:
        """Each other trained model's step fields and calls per iteration (its trace's failure is a note)."""
        self._stop_counting_other_models()
        traced = []
        for reference, shapes, calls in self._other_models:
            module = reference()
            if module is None or shapes is None:
                continue
            name = self._optimizer_name_for(module) or "sgd_momentum"
            fields = trace_step_fields(module, shapes, precision=self._model_precision, optimizer_name=name,
                                       memory_format=self._model_memory_format)
            if fields is None:
                self.notes.append(f"workload characterisation: {type(module).__name__}, which also trains, could not "
                                  "be traced; its work is not in the device model's step")
                continue
            traced.append({"fields": fields, "calls": calls})
        return traced
