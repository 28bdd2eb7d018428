"""Doubles of the GPU build image's tools and of the Hugging Face Hub, which the build and download Jobs use.

Each module is also a program, run by path or as `python3 -m mmd_testbed.build_tools.<module>`, and imports
only the standard library (and numpy, in `toolbox`), so the CPU stand-in of the builder image runs them
without the test bed's dependencies:

- `trtllm_tools`: `trtllm-build`, `huggingface-cli` and every TensorRT-LLM example script a build plan runs,
  dispatched on the name it is run as; they parse the real tools' command lines and write small files of
  the real layout;
- `xcomposer2_recipe`: InternLM-XComposer2's vision-engine recipe;
- `tensorrt_runtime`: the `tensorrt` package the builder probes;
- `nvidia_smi`: `nvidia-smi` over the fake GPUs the local cluster's device plugin double gave the
  container (in the serving stand-ins too);
- `toolbox`: lays all of these out where a build image holds the real tools;
- `hub`: the Hub's HTTP API for `huggingface_hub`'s downloads, over synthetic snapshots.
"""
