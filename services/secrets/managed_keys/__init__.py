"""Managed keys: named keys held in an external key backend (a PKCS#11 HSM, a KMS, a key
vault), their parameters, storage, and the signers that prove a key works (`test/sign`)."""
