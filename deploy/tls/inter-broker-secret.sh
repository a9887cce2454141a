#!/usr/bin/env bash
# An open (--insecure) cluster's inter-broker secret, made once on the operator's machine: brokers prove
# it to each other on their inter-broker listener (docs/SECURITY.md, "The inter-broker listener"), so a
# client on the network cannot act as a broker. deploy/azure/deploy.sh copies it to each VM over ssh,
# install.sh --inter-broker-secret takes it in, and deploy.sh deletes the copy.
set -euo pipefail

if [ $# -ne 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  echo "Usage: inter-broker-secret.sh OUTDIR   (makes OUTDIR/inter-broker.secret, 0600; an existing one is kept)"
  [ $# -eq 1 ] && exit 0
  exit 1
fi
command -v openssl >/dev/null || {
  echo "error: openssl not found (apt-get install -y openssl)" >&2
  exit 1
}
umask 077
mkdir -p "$1"
chmod 700 "$1"
if [ ! -s "$1/inter-broker.secret" ]; then
  # 43 characters of the URL-safe base64 alphabet (32 random bytes)
  openssl rand -base64 32 | tr -d '\n=' | tr '+/' '._' >"$1/inter-broker.secret"
  echo >>"$1/inter-broker.secret"
fi
echo "$1/inter-broker.secret"
