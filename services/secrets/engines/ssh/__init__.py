"""The SSH secrets engine (type `ssh`): one-time passwords, dynamic keys installed on target hosts,
and a CA that signs (or issues) OpenSSH certificates; key work runs on the crypto workers."""
