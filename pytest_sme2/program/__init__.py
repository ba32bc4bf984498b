"""From a model to a ``.pte``: lowering and its cache (export), and exporting many at once (pool)."""
