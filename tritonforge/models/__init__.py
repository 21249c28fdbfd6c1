"""Models built from the ops (chapter 9): the floor above ``tritonforge.ops``.

- :mod:`tritonforge.models.hf` — :func:`patch`: swap the package's kernels into a Hugging Face
  ``transformers`` Llama-family model (``transformers`` is optional; imported only when called).
"""
