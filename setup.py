"""The two parts of dejima in C: the end walk's stat comparison (dejima/adapters/_stat_compare.c,
used by tree_walk.py) and a pinned archive's tar headers (dejima/adapters/_tar_headers.c, used by
pinned_archives.py). Everything else is declared in pyproject.toml.

``optional``: where no C compiler or Python headers are, dejima installs without them and does the
same in Python, slower: the walk on a large tree (the 100k-file bench's end: ~1.7 x), the reading of
an npm tree's tarballs (~70 ms more CPU for 600); `dejima doctor` says which runs.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("dejima.adapters._stat_compare", ["dejima/adapters/_stat_compare.c"], optional=True),
                   Extension("dejima.adapters._tar_headers", ["dejima/adapters/_tar_headers.c"], optional=True)])
