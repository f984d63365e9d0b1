"""Peers the suites measure against, one module per peer, launched in the same run."""
