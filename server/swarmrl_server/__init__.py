"""swarmrl's server: hosts trainable models, records episodes, trains on them."""

__version__ = "0.1.0"
