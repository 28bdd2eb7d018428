"""Helpers shared by several test tiers."""
