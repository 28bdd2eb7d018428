"""The engine build Job's program: runs a build plan and writes engines atomically.

It imports nothing from the operator, kopf or kubernetes; the plan format is the one shared contract.
"""
