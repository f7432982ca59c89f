"""Password policies: parsing a policy document, generating passwords that obey it, and the
storage helper engines call (`generate_password(core, namespace, policy_name)`)."""

from services.secrets.passwords.generator import GenerationTimeout, generate
from services.secrets.passwords.policy import DEFAULT_POLICY, PasswordPolicy, PolicyError, parse
from services.secrets.passwords.store import generate_password

__all__ = [
    "DEFAULT_POLICY",
    "GenerationTimeout",
    "PasswordPolicy",
    "PolicyError",
    "generate",
    "generate_password",
    "parse",
]
