"""`python -m fetchwork.startd`: the same as `fetchwork startd`, with info logging to stderr."""

from fetchwork.cli import configure_logging
from fetchwork.startd.cli import startd_command

if __name__ == "__main__":
    configure_logging(1)
    startd_command()
