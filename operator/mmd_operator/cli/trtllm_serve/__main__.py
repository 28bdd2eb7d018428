"""`python -m mmd_operator.cli.trtllm_serve`: run the trtllm-serve double's command line."""

from mmd_operator.cli.trtllm_serve.cli import main

main()
