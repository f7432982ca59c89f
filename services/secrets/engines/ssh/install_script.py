"""The built-in script that installs and removes a dynamic public key on a target host.

A role's `install_script` replaces it; either is called as
`<script> install|uninstall <public key file> <authorized_keys file>`, run by the role's admin
user, which needs passwordless sudo unless it can write the file itself.
"""

BUILTIN_INSTALL_SCRIPT = r"""#!/bin/sh
# Install or remove one public key line in an authorized_keys file.
# Usage: install.sh install|uninstall PUBLIC_KEY_FILE AUTHORIZED_KEYS_FILE
set -eu
action=$1
keyfile=$2
authfile=$3
case "$action" in
  install|uninstall) ;;
  *) echo "usage: $0 install|uninstall PUBLIC_KEY_FILE AUTHORIZED_KEYS_FILE" >&2; exit 2 ;;
esac

# Use sudo only when the admin user cannot write the file itself.
dir=$(dirname "$authfile")
priv=""
if [ "$(id -u)" != 0 ]; then
  if [ -e "$authfile" ]; then
    [ -w "$authfile" ] || priv="sudo -n"
  elif [ -d "$dir" ]; then
    [ -w "$dir" ] || priv="sudo -n"
  else
    [ -w "$(dirname "$dir")" ] || priv="sudo -n"
  fi
fi

# Serialise concurrent runs of this admin user on this host where flock exists.
if command -v flock >/dev/null 2>&1; then
  exec 9>>"${HOME:-/tmp}/.trellis-ssh.lock"
  flock -w 10 9 || true
fi

$priv mkdir -p "$dir"
$priv touch "$authfile"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# Every line except this key's; grep exits 1 when nothing is left, which is fine.
$priv cat "$authfile" | grep -vxF -f "$keyfile" > "$tmp" || true
if [ "$action" = install ]; then
  cat "$keyfile" >> "$tmp"
fi
# Rewrite in place so the file keeps its owner and mode.
$priv sh -c 'cat "$1" > "$2"' sh "$tmp" "$authfile"
"""
