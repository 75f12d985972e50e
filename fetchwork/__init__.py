"""fetchwork: a pull-based distributed worker system.

The component subpackages (`fetchwork.config`, `fetchwork.hooks`,
`fetchwork.broker`, `fetchwork.starter`, `fetchwork.startd`) live in the
repository's top-level folders of the same names.
"""

# The one place the version is written; pyproject.toml reads it from here.
# (Asking importlib.metadata costs ~100 ms on every starter start.)
__version__ = "0.1.0"
