"""Reports: CSV tables, terminal text, JSON, markdown and pytest-html extras with SVG charts."""
