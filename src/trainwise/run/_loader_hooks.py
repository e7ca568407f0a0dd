"""The run agent's DataLoader interceptors: the iteration boundary (the training loader's next batch request),
resume's fast-forward and replay. A mixin of trainwise.run._child.RunAgent.
"""

from __future__ import annotations

from trainwise.run._agent_support import _consumed_all, _fetches_ahead


class LoaderHooks:
    """Methods of trainwise.run._child.RunAgent; they use its state."""

    def _install_loader_hooks(self) -> None:
        """Interceptors of the agent's torch patch (trainwise.agent.torch_patch): DataLoader.__iter__ and the
        iterators' batch requests, outside the profile recorder's."""
        from trainwise.run import _state

        agent = self

        def loader_iter(original_iter, loader):
            if not agent._is_training_pass(loader):
                return original_iter(loader)
            try:
                agent._training_loaders.add(loader)
            except TypeError:  # pragma: no cover - a loader class that cannot be weakly referenced
                pass
            agent._reassert_sigterm_handler()
            agent._end_replay(None)  # a replayed pass the script left early (break)
            agent.epoch_index += 1
            agent.train_loader = loader
            resume = agent.resume_state
            if resume is not None and agent.script_resumed_itself and agent.epoch_index == 0:
                # The script continues from its own checkpoint (its first pass is a later epoch), while
                # trainwise counts epochs from the script's start: ending "finished" epochs at once would
                # skip the script's remaining epochs, and the run would end without training them.
                agent._cannot_resume(f"the script resumed itself (it loaded its {agent.script_resumed_itself}'s state "
                                     "before training, from a checkpoint of its own), and trainwise's resume would "
                                     "skip its remaining epochs as already done; use one of the two resumes: run "
                                     "without --checkpoint-dir, or remove the script's own resume")
            loop = agent._framework_loop() if resume is not None else None
            if resume is not None and agent.epoch_index > resume["epoch"]:
                # The script left the checkpoint's epoch, ended after the batch let through it, without
                # asking for the next batch (where the checkpoint is loaded): load it now, before training.
                agent._resume_from(resume, loader, loop)
                resume = None
            if resume is not None and agent.epoch_index < resume["epoch"] and loop is not None and loop[0] == "transformers":
                # The HF Trainer ends training after an epoch without a step: go straight to the epoch
                # that was interrupted; its restored global_step then ends the run where it would have.
                agent.epoch_index = int(resume["epoch"])
            if agent.epoch_index > 0 and (loop or agent._framework_loop() or ("",))[0] == "transformers":
                # The HF Trainer numbers its epochs itself (set_epoch seeds the shuffle), from 0 again
                # after a resume: keep the sampler on trainwise's count, which the resume continued.
                for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
                    if hasattr(sampler, "set_epoch"):
                        sampler.set_epoch(agent.epoch_index)  # epoch_index counts from 0, as the Trainer does
            if resume is not None and agent.epoch_index < resume["epoch"]:
                iterator = original_iter(loader)
                iterator._trainwise_skip = True  # an epoch already done before the interruption
                # Its pass ends at once, unless the script reads afterwards a name only the loop's body
                # binds (`loss` of the last batch): then one batch goes through the body first. What it
                # changes in the model and optimizers is replaced when the checkpoint is loaded.
                iterator._trainwise_replay = 1 if agent._pass_must_bind_names(loop) else 0
                iterator._trainwise_restore = None
                agent._emptied_by_resume = None if iterator._trainwise_replay else str(agent.epoch_index + 1)
                return iterator
            resuming = resume is not None and agent.epoch_index == resume["epoch"]
            if resuming:
                _state.apply_rng(resume["epoch_start"]["rng"])
                _state.apply_generator_states(loader, resume["epoch_start"]["generators"])
            agent.epoch_start = {"rng": _state.capture_rng(), "generators": _state.generator_states(loader)}
            iterator = original_iter(loader)
            iterator._trainwise_skip = False
            iterator._trainwise_train = True
            iterator._trainwise_replay = 0
            iterator._trainwise_restore = None
            # A wrapper that fetches a batch ahead (accelerate's DataLoaderShard, under the HF Trainer)
            # asks for batch j+1 before it trains batch j: its first request trains nothing, and a
            # batch counts as done one request later (see iterator_next).
            iterator._trainwise_ahead = _fetches_ahead()
            iterator._trainwise_primed = False
            agent.batches_in_epoch = 0
            if resuming:
                done = int(resume["batches_in_epoch"])
                finished = done > 0 and _consumed_all(iterator, done)
                if finished and agent._pass_must_bind_names(loop):
                    # Checkpointed at the end of this epoch: the pass would end at once. Its last batch
                    # goes through the loop body; the checkpoint is loaded at the next batch request,
                    # the moment it was written.
                    agent._fast_forward(iterator, done - 1)
                    iterator._trainwise_replay = 1
                    iterator._trainwise_restore = (loader, loop)
                else:
                    agent._fast_forward(iterator, done)
                    agent._resume_from(resume, loader, loop)
                    if finished:
                        agent._emptied_by_resume = str(agent.epoch_index + 1)
            return iterator

        self.patch.intercept("loader_iter", loader_iter)

        def make_iterator_next(original_next):
            # a wrapper: the job's batch requests enter iterator_next straight from torch (trainwise.agent.torch_patch)
            def iterator_next(iterator):
                if getattr(iterator, "_trainwise_replay", 0) > 0:
                    # A batch of a pass the resume does not train (above): no checkpoint boundary, not
                    # counted, not measured.
                    iterator._trainwise_replay -= 1
                    agent._begin_replay(iterator)
                    return original_next(iterator)
                if getattr(iterator, "_trainwise_replaying", False):
                    agent._end_replay(iterator)
                restore = getattr(iterator, "_trainwise_restore", None)
                if restore is not None:
                    iterator._trainwise_restore = None
                    agent._resume_from(agent.resume_state, *restore)
                if getattr(iterator, "_trainwise_skip", False):
                    raise StopIteration
                if not getattr(iterator, "_trainwise_train", False):
                    return original_next(iterator)
                ahead = getattr(iterator, "_trainwise_ahead", False)
                if ahead and not iterator._trainwise_primed:
                    # The wrapper's first request of the pass: nothing trained since the last boundary.
                    iterator._trainwise_primed = True
                    return original_next(iterator)
                agent._boundary()
                try:
                    batch = original_next(iterator)
                except StopIteration:
                    if ahead:
                        # the wrapper still trains the batch it fetched ahead: it is done before the next request
                        agent.batches_in_epoch += 1
                        agent.global_batches += 1
                    raise
                agent._emptied_by_resume = None
                agent.batches_in_epoch += 1
                agent.global_batches += 1
                return batch

            return iterator_next

        self.patch.wrap("next", make_iterator_next)
