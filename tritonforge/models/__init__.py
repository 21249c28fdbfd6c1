"""Models built from the ops (chapter 9): the floor above ``tritonforge.ops``.

- :mod:`tritonforge.models.llama` — a Llama decoder written out, one set of weights run by a
  PyTorch backend or by the package's kernels, with a KV cache and greedy generation;
- :mod:`tritonforge.models.hf` — :func:`patch`: swap the package's kernels into a Hugging Face
  ``transformers`` Llama-family model (``transformers`` is optional; imported only when called);
- :mod:`tritonforge.models.tensor_parallel` — the Llama above served tensor-parallel over
  ``torch.distributed``: each rank a slice of the heads and MLP columns, two all-reduces a layer.
"""
