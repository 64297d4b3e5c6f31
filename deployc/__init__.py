"""deployc: a declarative deployment compiler for on-device AI."""

__version__ = "0.1.0"
