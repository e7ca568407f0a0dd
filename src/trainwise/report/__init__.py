"""Renderings: terminal tables (rich), and the plan report (HTML, PNG chart, JSON, Markdown)."""
