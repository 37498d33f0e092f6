"""Adapters: typer parameters → one use case → one view (≤ ~140 lines each)."""
