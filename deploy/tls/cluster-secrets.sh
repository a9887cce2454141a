#!/usr/bin/env bash
# A cluster's secrets, made once on the operator's machine (docs/SECURITY.md, deploy/azure/deploy.sh):
# the cluster's own CA, a key and certificate per broker, and random passwords for the users admin
# and broker. Nothing here goes into the repository or into a VM's cloud-init; deploy.sh copies each
# host's directory over ssh, install.sh --secrets-dir takes it in, and deploy.sh deletes the copy.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  cat <<'EOF'
Usage: cluster-secrets.sh OUTDIR ID=ADDR[,ADDR...] ...

Makes, in OUTDIR (created 0700; whatever exists already is kept, so a second run changes nothing):
  ca.pem, ca.key             the cluster's CA (ca.key never leaves this machine)
  admin.password             the admin user's password (a super user), random
  broker.password            the brokers' own user's password, random
  admin.properties           the admin's client config (kl-topics --command-config OUTDIR/admin.properties)
  broker-ID/                 for each broker ID: what install.sh --secrets-dir takes on its host:
                             ca.pem, broker.pem (key + certificate for CN=broker-ID, with each ADDR,
                             an IP address or a DNS name, as a subject alternative name),
                             admin.password, broker.password

  -h, --help                 this help
EOF
}

if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  usage
  exit 0
fi
die() {
  echo "error: $*" >&2
  exit 1
}
[ $# -ge 2 ] || die "give OUTDIR and at least one ID=ADDR (see --help)"
command -v openssl >/dev/null || die "openssl not found (apt-get install -y openssl)"
out=$1
shift
for spec in "$@"; do
  [[ $spec =~ ^[0-9]+=[A-Za-z0-9.:-]+(,[A-Za-z0-9.:-]+)*$ ]] || die "'$spec' is not ID=ADDR[,ADDR...]"
done

umask 077
mkdir -p "$out"
chmod 700 "$out"
out=$(cd "$out" && pwd)
for user in admin broker; do
  if [ ! -s "$out/$user.password" ]; then
    # 32 characters of the URL-safe base64 alphabet: fits a JAAS string and a SCRAM spec as it is
    openssl rand -base64 48 | tr -d '\n=' | tr '+/' '._' | cut -c1-32 >"$out/$user.password"
  fi
done
cat >"$out/admin.properties" <<EOF
# The admin's login to the cluster (written by deploy/tls/cluster-secrets.sh): a super user.
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-256
sasl.username=admin
sasl.password=$(cat "$out/admin.password")
ssl.ca.location=$out/ca.pem
EOF

for spec in "$@"; do
  id=${spec%%=*}
  IFS=, read -r -a addrs <<<"${spec#*=}"
  host=$out/broker-$id
  mkdir -p "$host"
  if [ ! -s "$out/broker-$id.pem" ]; then
    "$HERE/make-certs.sh" "$out" "broker-$id" "${addrs[@]}" >/dev/null
  fi
  cp "$out/ca.pem" "$host/ca.pem"
  cp "$out/broker-$id.pem" "$host/broker.pem"
  cp "$out/admin.password" "$out/broker.password" "$host/"
done
echo "$out"
