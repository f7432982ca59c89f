"""HCL2 job specifications: expression evaluation over python-hcl2's output, the mapping to
Nomad's JSON job shape, variables, and the api-package Canonicalize defaults."""
