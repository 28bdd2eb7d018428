"""Maintainer tooling, shipped in no distribution: the generators and the real images' build (`make`)."""
