"""Jinja2 templates of the pure core (package data)."""
