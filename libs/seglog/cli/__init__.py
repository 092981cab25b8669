"""The `seglog` command."""
