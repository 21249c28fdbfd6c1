"""The ops floor: one module per op (math, kernels, launchers, the PyTorch custom op, the public
function). Modules are named for the op, not like the function they export, so that
``tritonforge.ops.rmsnorm`` (the module) and ``tritonforge.rms_norm`` (the function) never
shadow each other.

==============================  =====================================  ==========
module                          public function                        chapter
==============================  =====================================  ==========
``fused_axpy``                  ``axpy``                               0
``teaching``                    ``vector_add``, ``add_2d``,            2
                                ``program_map``
``rmsnorm``                     ``rms_norm``                           3
``rmsnorm_backward``            (its autograd)                         4
``swiglu``                      ``swiglu``                             5
``swiglu_front``                ``swiglu_mlp_front``                   5
``softmax``                     ``softmax``                            6
``attention``                   ``flash_attention``                    7
``attention_prefill``           (its prefill path)                     7
``attention_decode``            (its decode path)                      7
``attention_backward``          (its backward: tiles, routing,         7
                                autograd)
``attention_backward_kernels``  (its backward's kernels)               7
``rope``                        ``rope``                               9
``rope_pair``                   ``rope_qk`` (queries and keys in one   9
                                launch)
``rotary``                      (the rotation both rope kernels        9
                                share)
``gpu``                         (the GPU's fast paths, beside the ops  3, 6
                                that choose them: cooperative rows,
                                several rows a program)
==============================  =====================================  ==========

Ops import only the floor below them (``runtime``, ``checks``, ``hardware``, ``launches``,
``reference``, ``kernel_utils``, ``_triton``); nothing here imports the benchmark harness, the
book's helpers or the exercises. A backward module registers its op's autograd when imported, so
this package imports them.
"""

from tritonforge.ops import (
    attention_backward,  # noqa: F401  (registers flash_attention's autograd)
    rmsnorm_backward,  # noqa: F401  (registers rms_norm's autograd)
    softmax_backward,  # noqa: F401  (registers softmax's autograd)
)
