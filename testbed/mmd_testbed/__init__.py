"""The test bed: the local cluster, every double, the local tritonserver, the demo; in no product image.

- `localcluster`: a real control plane and real nodes on this machine, and the CPU stand-in images;
- `triton`: the local tritonserver, the Triton model-code doubles, small test media;
- `trtllm_serve`: the trtllm-serve double;
- `build_tools`: the GPU build tools' and the Hub's doubles;
- `demo`: `make demo`;
- `cli`: `python -m mmd_testbed cluster ...` and `... images build`, the test bed's command line;
- `ports`: loopback ports for its servers, from below the kernel's ephemeral range.

It may import the operator, the builder and mmctl (it tests them); none of them imports it.
"""
