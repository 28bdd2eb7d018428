"""`python -m mmd_testbed.trtllm_serve`: run the trtllm-serve double's command line."""

from mmd_testbed.trtllm_serve.cli import main

main()
