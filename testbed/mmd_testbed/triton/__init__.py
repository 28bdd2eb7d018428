"""Serve a rendered model repository on the local CPU tritonserver, with doubles of the GPU-only models.

- `localserver`: finds the tritonserver of the nvidia-pytriton wheel, starts and stops it;
- `serving`: runs a plan's repository with the doubles and the plan's own launch argv;
- `engines`: the plan's engine cache entry as the build-tool doubles write it (the engines' config.json
  the doubles read their limits from);
- `media`: small images, video frames and tone-coded speech made on the spot;
- `doubles`: the Python-backend doubles of the GPU-only models.
"""
