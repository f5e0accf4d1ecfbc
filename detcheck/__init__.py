"""`python -m detcheck`: the `detcheck` command, for an environment whose scripts are not on PATH."""
