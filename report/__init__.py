"""Rendering of results: tables (rich), JSON, plots (matplotlib) and simulated Chrome traces.
Nothing here computes a metric; it only shows what models/ and scenarios/ computed."""
