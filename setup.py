"""The one part of dejima in C: the end walk's stat comparison (dejima/adapters/_stat_compare.c,
used by tree_walk.py). Everything else is declared in pyproject.toml.

``optional``: where no C compiler or Python headers are, dejima installs without it and the walk
compares in Python, ~1.5 x slower on a large tree; `dejima doctor` says which one runs.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("dejima.adapters._stat_compare", ["dejima/adapters/_stat_compare.c"], optional=True)])
