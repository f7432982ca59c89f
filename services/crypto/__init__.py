"""The crypto worker: CPU-heavy asymmetric work (key generation, X.509, CSR, CRL, SSH signing)
served over the bus in the `crypto` queue group, one process per core."""
