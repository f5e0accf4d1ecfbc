"""A broken probe plug-in: its module raises on import (tests/probes/test_registry.py checks that
every command names it in one line, exit 2, and that `detcheck --help` still works)."""

raise RuntimeError("this plug-in needs a GPU library that is not installed")
