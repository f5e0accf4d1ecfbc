"""Renderers over RunResult: the same tables whether results are fresh or stored."""
