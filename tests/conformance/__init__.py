"""Differential conformance: the same requests against the real OpenBao and Trellis."""
