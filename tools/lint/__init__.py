"""The repository's own checks that no off-the-shelf linter makes (`make lint`)."""
