"""The one part of dejima in C: the end walk's stat comparison (dejima/adapters/_stat_compare.c,
used by tree_walk.py). Everything else is declared in pyproject.toml.

``optional``: where no C compiler or Python headers are, dejima installs without it and the walk
compares in Python, slower on a large tree (the 100k-file bench's end: ~1.7 x); `dejima doctor` says which one runs.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("dejima.adapters._stat_compare", ["dejima/adapters/_stat_compare.c"], optional=True)])
