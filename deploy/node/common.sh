# shellcheck shell=bash
# Sourced by the deploy/node scripts: the on-host layout, node.env, starting and stopping the
# launchers without systemd, the ZooKeeper ensemble of coordination=zookeeper, and the checks on
# `kl-topics --describe` output that the rolling restart waits on.
# The KL_* variables set here are read by the scripts that source this file:
# shellcheck disable=SC2034

KL_UNIT=kl-broker.service
# systemd's TimeoutStopSec and upgrade.sh's wait after SIGTERM: a clean shutdown flushes and
# fsyncs every partition, which can take a while on a busy disk.
KL_STOP_TIMEOUT=60
KL_NODE_SCRIPTS=(common.sh install.sh upgrade.sh wait-isr.sh status.sh spark.sh)
# coordination=zookeeper: the ensemble's unit and ports (ZooKeeper's usual ones: clients, followers
# to the leader, leader election), and Debian's/Ubuntu's server jar (package `zookeeper`; its
# manifest's Class-Path names the jars it needs).
KL_ZK_UNIT=kl-zookeeper.service
KL_ZK_CLIENT_PORT=2181
KL_ZK_PEER_PORT=2888
KL_ZK_ELECTION_PORT=3888
KL_ZK_JAR=/usr/share/java/zookeeper.jar

# --- idempotent writes (install.sh, spark.sh): each counts what it changed in CHANGES, so a caller
# restarts only what changed; callers set CHANGES=0, SCRATCH (a temp dir) and `shopt -s lastpipe`.

changed() {
  CHANGES=$((CHANGES + 1))
  note "$*"
}

# Writes stdin to $1 with mode $2 (and owner $3, if given) unless it already has exactly that content,
# mode and owner, so that a second run leaves files (and their mtimes) untouched.
# (The new content is compared from the caller's scratch dir $SCRATCH: even a temporary file in the
# target's directory would change that directory's mtime.)
put_file() {
  local path=$1 mode=$2 owner=${3:-} tmp
  cat >"$SCRATCH/new"
  if [ -f "$path" ] && cmp -s "$SCRATCH/new" "$path"; then
    if [ "$(stat -c %a "$path")" != "$mode" ]; then
      chmod "$mode" "$path"
      changed "chmod $mode $path"
    fi
    if [ -n "$owner" ] && [ "$(stat -c %U:%G "$path")" != "$owner" ]; then
      chown "$owner" "$path"
      changed "chown $owner $path"
    fi
    return 0
  fi
  # atomically: a reader (or a crash) sees the old file or the new one, never half of one; a secret
  # is never readable by others, not even for a moment (mktemp makes the file 0600)
  tmp=$(mktemp "$path.XXXXXX")
  if [ -n "$owner" ]; then
    chown "$owner" "$tmp"
  fi
  chmod "$mode" "$tmp"
  cat "$SCRATCH/new" >"$tmp"
  mv -f "$tmp" "$path"
  changed "wrote $path"
}

# A directory with this mode and owner, touched only if something differs.
put_dir() {
  local path=$1 mode=$2 owner=$3
  if [ ! -d "$path" ]; then
    mkdir -p "$path"
    changed "created $path"
  fi
  if [ "$(stat -c %a "$path")" != "$mode" ]; then
    chmod "$mode" "$path"
    changed "chmod $mode $path"
  fi
  if [ "$(stat -c %U:%G "$path")" != "$owner" ]; then
    chown "$owner" "$path"
    changed "chown $owner $path"
  fi
}

die() {
  echo "error: $*" >&2
  exit 1
}

# The value of option $1 (the caller passes "$@"), or a clear error if there is none.
arg() {
  if [ $# -lt 2 ] || [ -z "$2" ]; then
    die "$1 needs a value (see --help)"
  fi
  printf '%s' "$2"
}

note() {
  echo "[kafkalite${KL_BROKER_ID:+ broker $KL_BROKER_ID}] $*" >&2
}

# The on-host layout. $1 is the root ("" for /): tests and containers install several brokers
# on one machine, each under its own root; the paths written into the unit and the launcher are
# the rooted ones, so nothing is chrooted.
kl_paths() {
  local root=${1%/}
  KL_ROOT=$root
  KL_PREFIX=$root/opt/kafkalite
  KL_VENV=$KL_PREFIX/venv
  KL_LAUNCHER=$KL_PREFIX/bin/kl-broker-run
  KL_STAMP=$KL_PREFIX/.package-stamp
  KL_CONF_DIR=$root/etc/kafkalite
  KL_NODE_ENV=$KL_CONF_DIR/node.env
  KL_PROPERTIES=$KL_CONF_DIR/server.properties
  # SASL_SSL (the default): the cluster CA, this broker's key and certificate, and the passwords,
  # readable by root and the service user only; the admin's client config, by root only.
  KL_SECRETS_DIR=$KL_CONF_DIR/secrets
  KL_CLIENT_CONFIG=$KL_CONF_DIR/admin.properties
  KL_STATE_DIR=$root/var/lib/kafkalite
  KL_DATA_DIR=$KL_STATE_DIR/data
  KL_PIDFILE=$KL_STATE_DIR/kl-broker.pid
  KL_LOG=$KL_STATE_DIR/broker.log
  KL_UNIT_DIR=$root/etc/systemd/system
  KL_UNIT_FILE=$KL_UNIT_DIR/$KL_UNIT
  KL_ZK_CONF_DIR=$KL_CONF_DIR/zookeeper
  KL_ZK_CFG=$KL_ZK_CONF_DIR/zoo.cfg
  KL_ZK_DATA_DIR=$KL_STATE_DIR/zookeeper
  KL_ZK_MYID=$KL_ZK_DATA_DIR/myid
  KL_ZK_LAUNCHER=$KL_PREFIX/bin/kl-zookeeper-run
  KL_ZK_PIDFILE=$KL_STATE_DIR/kl-zookeeper.pid
  KL_ZK_LOG=$KL_STATE_DIR/zookeeper.log
  KL_ZK_UNIT_FILE=$KL_UNIT_DIR/$KL_ZK_UNIT
}

# node.env: what install.sh was told (broker id, peers, user, ...), for upgrade.sh, wait-isr.sh,
# status.sh and `install.sh --reuse-config`.
kl_load_env() {
  [ -f "$KL_NODE_ENV" ] || die "no $KL_NODE_ENV: run install.sh first${KL_ROOT:+ (with --root $KL_ROOT)}"
  # shellcheck source=/dev/null
  source "$KL_NODE_ENV"
}

# The node scripts' CLIs log in as the admin when the cluster is secured (install.sh wrote its
# client config): sets KL_CLIENT_ARGS to (--command-config FILE), or to nothing.
kl_client_args() {
  KL_CLIENT_ARGS=()
  if [ -f "$KL_CLIENT_CONFIG" ]; then
    KL_CLIENT_ARGS=(--command-config "$KL_CLIENT_CONFIG")
  fi
}

# "1@h1:9092,2@h2:9092" -> "h1:9092,h2:9092"
kl_bootstrap() {
  local out="" entry
  local -a entries
  IFS=, read -r -a entries <<<"$1"
  for entry in "${entries[@]}"; do
    out+="${out:+,}${entry#*@}"
  done
  printf '%s\n' "$out"
}

# The command that runs a launcher ($1, default the broker's), as the service user. The units run
# the same launchers (ExecStart) with User= set, so both paths run one command line.
kl_launch_argv() {
  local launcher=${1:-$KL_LAUNCHER}
  if [ "$(id -un)" = "$KL_USER" ]; then
    KL_LAUNCH=("$launcher")
  else
    KL_LAUNCH=(runuser -u "$KL_USER" -- "$launcher")
  fi
}

# Without systemd: runs launcher $1 as the service user in the background, detached (its own
# session, and not a child of this shell, which may exec the broker next), appending its output to
# log $2; waits until function $3 prints its pid (each launcher writes its pid file first thing).
kl_start_detached() {
  local log=$2 pidfn=$3 tries=0
  kl_launch_argv "$1"
  (setsid "${KL_LAUNCH[@]}" >>"$log" 2>&1 </dev/null &)
  while [ "$tries" -lt 100 ]; do
    [ -z "$("$pidfn")" ] || return 0
    sleep 0.1
    tries=$((tries + 1))
  done
  tail -n 20 "$log" >&2 || true
  return 1
}

# Stops process $1 cleanly: SIGTERM, then SIGKILL if it still runs after KL_STOP_TIMEOUT seconds.
kl_stop_pid() {
  local pid=$1 waited=0
  kill -TERM "$pid" 2>/dev/null || return 0
  while kl_alive "$pid" && [ "$waited" -lt $((KL_STOP_TIMEOUT * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kl_alive "$pid"; then
    note "pid $pid still running ${KL_STOP_TIMEOUT} s after SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
}

kl_systemd_running() {
  [ -d /run/systemd/system ]
}

# Whether process $1 runs: exists and is not a zombie (a broker run in the foreground, by a test
# or a container, stays a zombie after it exits until its parent reaps it).
kl_alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# The pid in pid file $1 if that process still runs a command line containing $2, or nothing (the
# pid may have been reused since).
kl_pid_of() {
  local pid
  [ -f "$1" ] || return 0
  pid=$(cat "$1" 2>/dev/null || true)
  case $pid in '' | *[!0-9]*) return 0 ;; esac
  if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$2"; then
    printf '%s\n' "$pid"
  fi
}

# The pid of the running broker (from the launcher's pid file), or nothing.
kl_broker_pid() {
  kl_pid_of "$KL_PIDFILE" 'kl-broker start'
}

# The pid of this host's running ZooKeeper server (from its launcher's pid file), or nothing.
kl_zookeeper_pid() {
  kl_pid_of "$KL_ZK_PIDFILE" "QuorumPeerMain $KL_ZK_CFG"
}

kl_broker_running() {
  if [ "$KL_SYSTEMD" = yes ]; then
    systemctl is-active --quiet "$KL_UNIT"
  else
    [ -n "$(kl_broker_pid)" ]
  fi
}

kl_zookeeper_running() {
  if [ "$KL_SYSTEMD" = yes ]; then
    systemctl is-active --quiet "$KL_ZK_UNIT"
  else
    [ -n "$(kl_zookeeper_pid)" ]
  fi
}

# --- coordination=zookeeper: the ensemble ---------------------------------------------------------
# node.env keeps what install.sh was told: KL_ZK_SERVERS (the ensemble that install.sh runs,
# "1=HOST,2=HOST,3=HOST", ZooKeeper's server.N), KL_ZK_CONNECT (zookeeper.connect, when it is not
# the default HOST:2181,... of those servers) and KL_ZK_ID (this host's server id, when it is not
# the one whose HOST is the broker's address).

# Checks a --zookeeper-servers list: ID=HOST entries, ids 1..255, each id and host once.
kl_zk_check_servers() {
  local entry id host seen_ids=, seen_hosts=,
  local -a entries
  IFS=, read -r -a entries <<<"$1"
  [ ${#entries[@]} -gt 0 ] || die "--zookeeper-servers is empty"
  for entry in "${entries[@]}"; do
    [[ $entry =~ ^[0-9]+=[A-Za-z0-9._-]+$ ]] || die "--zookeeper-servers: '$entry' is not ID=HOST"
    id=${entry%%=*} host=${entry#*=}
    if [ "$id" -lt 1 ] || [ "$id" -gt 255 ]; then
      die "--zookeeper-servers: server ids are 1..255, got $id"
    fi
    [[ $seen_ids != *,$id,* ]] || die "--zookeeper-servers: server id $id twice"
    [[ $seen_hosts != *,$host,* ]] || die "--zookeeper-servers: host $host twice"
    seen_ids+="$id," seen_hosts+="$host,"
  done
}

# The host of server $1 in KL_ZK_SERVERS, or nothing.
kl_zk_host_of() {
  local entry
  local -a entries
  IFS=, read -r -a entries <<<"$KL_ZK_SERVERS"
  for entry in ${entries[@]+"${entries[@]}"}; do
    if [ "${entry%%=*}" = "$1" ]; then
      printf '%s\n' "${entry#*=}"
    fi
  done
}

# This host's ZooKeeper server id, or nothing when it runs none: KL_ZK_ID, else the server whose
# HOST is this broker's address.
kl_zk_server_id() {
  local entry
  local -a entries
  if [ "$KL_COORDINATION" != zookeeper ]; then
    return 0
  fi
  if [ -n "$KL_ZK_ID" ]; then
    printf '%s\n' "$KL_ZK_ID"
    return 0
  fi
  IFS=, read -r -a entries <<<"$KL_ZK_SERVERS"
  for entry in ${entries[@]+"${entries[@]}"}; do
    if [ "${entry#*=}" = "$KL_HOST" ]; then
      printf '%s\n' "${entry%%=*}"
    fi
  done
}

# zookeeper.connect: KL_ZK_CONNECT, else every server's HOST:2181 (the broker's default chroot).
kl_zk_connect() {
  local entry out=""
  local -a entries
  if [ -n "$KL_ZK_CONNECT" ]; then
    printf '%s\n' "$KL_ZK_CONNECT"
    return 0
  fi
  IFS=, read -r -a entries <<<"$KL_ZK_SERVERS"
  for entry in ${entries[@]+"${entries[@]}"}; do
    out+="${out:+,}${entry#*=}:$KL_ZK_CLIENT_PORT"
  done
  printf '%s\n' "$out"
}

# The mode of the ZooKeeper server at host $1 port $2 (leader, follower, standalone), from its
# `srvr` four-letter command; nothing if it does not answer (down, or not serving: no quorum).
kl_zk_mode() {
  # shellcheck disable=SC2016 # $1 and $2 expand in the inner bash
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2" && printf srvr >&3 && cat <&3' _ "$1" "$2" 2>/dev/null |
    sed -n 's/^Mode: //p' || true
}

# Is something listening on host:port? (bash's /dev/tcp: no extra tools on the VM)
kl_port_open() {
  # shellcheck disable=SC2016 # $1 and $2 expand in the inner bash
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

# Reads `kl-topics --describe` on stdin and checks every partition line against a condition:
#   healthy  every partition has a leader and its ISR is all of its replicas
#   in-sync  broker $2 is in the ISR of every partition it replicates, each of which has a leader
#   fenced   broker $2 leads none of its partitions and has left every ISR it shared with others
#            (the controller fenced it; an ISR of it alone stays, so only it can lead cleanly again)
# Prints "N partitions ok" and returns 0, or prints the first failing partition and returns 1.
kl_check_partitions() {
  awk -F '\t' -v mode="$1" -v id="${2:-}" '
    function val(prefix,   i) {
      for (i = 1; i <= NF; i++) if (index($i, prefix) == 1) return substr($i, length(prefix) + 1)
      return ""
    }
    function has(list, x,   n, a, i) {
      n = split(list, a, ",")
      for (i = 1; i <= n; i++) if (a[i] == x) return 1
      return 0
    }
    function sameset(x, y,   n, a, i) {
      if (split(x, a, ",") != split(y, a, ",")) return 0
      n = split(x, a, ",")
      for (i = 1; i <= n; i++) if (!has(y, a[i])) return 0
      return 1
    }
    index($0, "Partition: ") && index($0, "Isr: ") {
      parts++
      leader = val("Leader: "); reps = val("Replicas: "); isr = val("Isr: ")
      where = val("Topic: ") "-" val("Partition: ") " (Leader: " leader ", Replicas: " reps ", Isr: " isr ")"
      fail = ""
      if (mode == "healthy") {
        if (leader == "none") fail = "no leader"
        else if (!sameset(reps, isr)) fail = "under-replicated"
      } else if (has(reps, id)) {
        if (mode == "in-sync" && leader == "none") fail = "no leader"
        else if (mode == "in-sync" && !has(isr, id)) fail = "broker " id " not in the ISR yet"
        else if (mode == "fenced" && leader == id) fail = "broker " id " still leads"
        else if (mode == "fenced" && has(isr, id) && isr != id) fail = "broker " id " still in the ISR"
      }
      if (fail != "" && first == "") first = where ": " fail
    }
    END {
      if (first != "") { print first; exit 1 }
      print parts + 0 " partitions ok"
    }'
}
