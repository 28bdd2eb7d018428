"""`make demo`: the operator's main job on the local cluster (`python -m mmd_testbed.demo`).

- `common`: what both demos share (the narration, the examples, the resource watcher);
- `real_nodes`: the default, on real nodes with the project's images;
- `kwok`: on kwok's simulated GPU nodes, where this machine cannot run real nodes, or with `--kwok`.
"""
