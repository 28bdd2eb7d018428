"""Doubles of the GPU-only Triton models, for serving a rendered repository on a CPU tritonserver.

The triton test tier, `make bench-triton` and `make demo` load the
operator's rendered `config.pbtxt` files unchanged into the real tritonserver of the nvidia-pytriton wheel,
with Python-backend doubles for every model whose code needs a GPU or comes from the serving image.

- `repository`: writes a rendered repository with a double for every non-ensemble model;
- `image`: the doubles as the CPU stand-in serving image runs them, at the real image's paths;
- `runtime`, `base`, `frontends`, `engine`, `executor`, `bls`, `codec` and `world`: the doubles' behaviour,
  copied (as the package `triton_doubles`) beside each double's `model.py` and run inside Triton's Python
  backend stub, so they import only numpy, Pillow, the standard library, `triton_python_backend_utils` and
  (under mpirun) mpi4py: `runtime` picks the double of a model's role, `base` is what they share,
  `frontends` the models around the engine, `engine` the TensorRT-LLM backend's, `executor` the backend's
  and executor's request rules, `bls` the BLS entry points; `codec` also decodes what the doubles answer;
  `world` joins the MPI world of a rank (the trtllm-serve double's ranks join with it too).
"""
