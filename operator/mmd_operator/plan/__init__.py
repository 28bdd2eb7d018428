"""Pure planning: spec to derived limits, cacheKey, build plan, rendered configs and launch argv."""
