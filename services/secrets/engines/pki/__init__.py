"""The PKI engine (type `pki`): issuers and keys, roles, issuing and signing X.509 certificates,
revocation with CRLs. Every CPU-heavy step runs on a crypto worker (services/crypto)."""
