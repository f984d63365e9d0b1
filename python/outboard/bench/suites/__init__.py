"""One module per benchmark suite, each declaring a ``SUITE`` (see ../README.md)."""
