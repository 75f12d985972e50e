"""fetchwork.config: the configuration language, its defaults, and ClassAd plumbing."""

from fetchwork.config.loader import Config, get_config, reload_config

__all__ = ["Config", "get_config", "reload_config"]
