"""fetchwork: a pull-based distributed worker system.

The component subpackages (`fetchwork.config`, `fetchwork.hooks`,
`fetchwork.broker`, `fetchwork.starter`, `fetchwork.startd`) live in the
repository's top-level folders of the same names.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fetchwork")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
