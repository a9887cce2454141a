#!/usr/bin/env bash
# A cluster's TLS material with openssl, on the operator's machine (docs/SECURITY.md):
#   make-certs.sh OUTDIR NAME [SAN ...]
# makes OUTDIR/ca.pem + ca.key (once: the cluster's own CA) and, signed by it, NAME.crt, NAME.key and
# NAME.pem (key + certificate chain: Kafka's ssl.keystore.type=PEM, ssl.keystore.location). Its subject is
# CN=NAME (the principal User:CN=NAME under mutual TLS); SANs are DNS:NAME plus each SAN given
# (an IP address or a DNS name). Keys are created 0600; ca.key never leaves the operator's machine.
set -euo pipefail
usage() { echo "Usage: $0 OUTDIR NAME [SAN ...]  (the cluster CA once, then NAME's key and certificate)"; }
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  usage
  exit 0
fi
if [ $# -lt 2 ]; then
  usage >&2
  exit 2
fi
out=$1 name=$2
shift 2
command -v openssl >/dev/null || { echo "error: openssl not found (apt-get install -y openssl)" >&2; exit 1; }
mkdir -p "$out"
umask 077
if [ ! -f "$out/ca.pem" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=kafkalite-ca" \
    -keyout "$out/ca.key" -out "$out/ca.pem" 2>/dev/null
  chmod 644 "$out/ca.pem"
fi
sans="DNS:$name"
for s in "$@"; do
  if [[ $s =~ ^[0-9.]+$ || $s == *:* ]]; then sans="$sans,IP:$s"; else sans="$sans,DNS:$s"; fi
done
openssl req -newkey rsa:2048 -nodes -subj "/CN=$name" -keyout "$out/$name.key" -out "$out/$name.csr" 2>/dev/null
openssl x509 -req -in "$out/$name.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" -CAcreateserial -days 825 \
  -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$sans") \
  -out "$out/$name.crt" 2>/dev/null
cat "$out/$name.key" "$out/$name.crt" > "$out/$name.pem"
rm -f "$out/$name.csr"
chmod 644 "$out/$name.crt"
echo "$out/$name.pem"
