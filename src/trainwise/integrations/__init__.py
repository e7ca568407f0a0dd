"""Framework integrations: callbacks for Keras 3, PyTorch Lightning and the Hugging Face Trainer that
record the same Profile as `trainwise profile`, from the framework's own loop hooks.

Each lives in its own module and imports its framework only there, so importing trainwise (or this
package) never imports keras, lightning or transformers::

    from trainwise.integrations.keras import ProfilingCallback          # pip install trainwise[keras]
    from trainwise.integrations.lightning import ProfilingCallback      # pip install trainwise[lightning]
    from trainwise.integrations.huggingface import ProfilingCallback    # pip install trainwise[hf]

Two ways to use them:

- under `trainwise profile -- python train.py`: the callback drives the profiler that the command armed
  (Lightning and HF Trainer scripts get it added automatically; Keras scripts add it to `fit`);
- on its own: ``ProfilingCallback(output="profile.json")`` measures the run in-process and writes the
  Profile when training ends (``mode="sampled"`` stops training once the estimate is stable).
"""
