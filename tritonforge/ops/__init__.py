"""The ops floor: one module per op (math, kernels, launchers, the PyTorch custom op, the public
function). Modules are named for the op, not like the function they export, so that
``tritonforge.ops.rmsnorm`` (the module) and ``tritonforge.rms_norm`` (the function) never
shadow each other.

=================  =====================================  ==========
module             public function                        chapter
=================  =====================================  ==========
``fused_axpy``     ``axpy``                               0
``rmsnorm``        ``rms_norm``                           3, 4
``swiglu``         ``swiglu``, ``swiglu_mlp_front``       5
``softmax``        ``softmax``                            6
``attention``      ``flash_attention``                    7
``rope``           ``rope``, ``rope_qk``                  9
``teaching``       ``vector_add``, ``add_2d``,            2
                   ``program_map``
=================  =====================================  ==========

Ops import only the floor below them (``runtime``, ``reference``, ``kernel_utils``,
``_triton``); nothing here imports the benchmark harness, the book's helpers or the exercises.
"""
