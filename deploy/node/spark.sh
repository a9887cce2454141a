#!/usr/bin/env bash
# Run Spark next to this host's broker (issue 16 §4): a Spark standalone worker (kl-spark-worker.service)
# whose executors know the broker's data directory (KAFKALITE_DATA_DIR), so the `kafkalite` source reads
# the partitions this host holds from its segment files and fetches the others from their leaders; with
# --run-master, this host also runs the master (kl-spark-master.service). Spark comes from PyPI into the
# broker's venv (pyspark, pyarrow, pandas: the package's [spark] extra), Java 17 from apt-get if missing.
# Run after install.sh (it reads node.env). Idempotent: a second run with the same arguments changes nothing.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

usage() {
  cat <<'EOF'
Usage: spark.sh --master spark://HOST:7077 [--run-master] [options]

  --master URL          the standalone master the worker joins (spark://HOST:PORT)
  --run-master          also run the master on this host (its address must be the URL's HOST)
  --cores N             cores the worker offers (default: all)
  --memory SIZE         memory the worker offers, e.g. 4g (default: Spark's, all but 1 GiB)
  --webui-ports M,W     the master's and the worker's web UI ports (default 8080,8081; 0: any free one)
  --root DIR            the --root install.sh was given
  --no-systemd          no units: start the launchers in the background (pid files, logs in
                        ROOT/var/lib/kafkalite)
  --no-start            set everything up, start nothing
  -h, --help            this help

Submit jobs with --master URL from any host that reaches the master, e.g. on a broker host:
  /opt/kafkalite/venv/bin/kl-spark stats --bootstrap-server HOST:9092 --topic tweets --master URL
EOF
}

A_ROOT="" A_MASTER="" RUN_MASTER=0 A_CORES="" A_MEMORY="" NO_SYSTEMD="" NO_START=0 A_UI=8080,8081
while [ $# -gt 0 ]; do
  case $1 in
    --master)
      A_MASTER=$(arg "$@")
      shift
      ;;
    --run-master) RUN_MASTER=1 ;;
    --cores)
      A_CORES=$(arg "$@")
      shift
      ;;
    --memory)
      A_MEMORY=$(arg "$@")
      shift
      ;;
    --webui-ports)
      A_UI=$(arg "$@")
      shift
      ;;
    --root)
      A_ROOT=$(arg "$@")
      shift
      ;;
    --no-systemd) NO_SYSTEMD=1 ;;
    --no-start) NO_START=1 ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
[[ $A_MASTER =~ ^spark://([A-Za-z0-9._-]+):([0-9]+)$ ]] || die "--master must be spark://HOST:PORT, got '$A_MASTER'"
MASTER_HOST=${BASH_REMATCH[1]} MASTER_PORT=${BASH_REMATCH[2]}
[ -z "$A_CORES" ] || [[ $A_CORES =~ ^[1-9][0-9]*$ ]] || die "--cores must be a positive number, got '$A_CORES'"
[[ $A_UI =~ ^([0-9]+),([0-9]+)$ ]] || die "--webui-ports must be MASTER,WORKER port numbers, got '$A_UI'"
MASTER_UI=${BASH_REMATCH[1]} WORKER_UI=${BASH_REMATCH[2]}
[ -z "$A_MEMORY" ] || [[ $A_MEMORY =~ ^[1-9][0-9]*[mMgG]$ ]] || die "--memory must look like 512m or 4g, got '$A_MEMORY'"

kl_paths "$A_ROOT"
kl_load_env
KL_BROKER_ID=${KL_BROKER_ID:-}
KL_GROUP=$(id -gn "$KL_USER")
if [ "$RUN_MASTER" = 1 ] && [ "$MASTER_HOST" != "$KL_HOST" ]; then
  die "--run-master: the master runs on this host ($KL_HOST), but --master names $MASTER_HOST"
fi
[ -x "$KL_VENV/bin/python" ] || die "no venv at $KL_VENV: run install.sh first"
SPARK_WORK=$KL_STATE_DIR/spark-work
SPARK_ENV=$KL_CONF_DIR/spark-env.sh
WORKER_RUN=$KL_PREFIX/bin/kl-spark-worker-run
MASTER_RUN=$KL_PREFIX/bin/kl-spark-master-run
WORKER_PIDFILE=$KL_STATE_DIR/kl-spark-worker.pid
MASTER_PIDFILE=$KL_STATE_DIR/kl-spark-master.pid
WORKER_UNIT=kl-spark-worker.service
MASTER_UNIT=kl-spark-master.service

shopt -s lastpipe
CHANGES=0
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

# --- 1. Spark and Java ---------------------------------------------------------------------------------
if ! "$KL_VENV/bin/python" -c 'import pyspark, pyarrow, pandas' 2>/dev/null; then
  note "installing pyspark, pyarrow and pandas into $KL_VENV (pip)"
  "$KL_VENV/bin/python" -m pip install -q 'pyspark>=4.2' 'pyarrow>=15' 'pandas>=2.2,<3' >&2 || die "pip install failed"
  changed "installed pyspark"
fi
SPARK_HOME=$("$KL_VENV/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
java=$(command -v java || true)
if [ -z "$java" ] || ! "$java" -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])'; then
  command -v apt-get >/dev/null || die "Spark needs Java 17 or newer: install it (no apt-get here)"
  note "installing Java 17 (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless >&2 || die "apt-get install openjdk-17-jre-headless failed"
  changed "installed openjdk-17-jre-headless"
  java=$(command -v java) || die "no java after installing it"
fi
JAVA_HOME=$(dirname "$(dirname "$(readlink -f "$java")")")

# --- 2. settings and launchers ---------------------------------------------------------------------------
put_dir "$SPARK_WORK" 750 "$KL_USER:$KL_GROUP"
{
  echo "# Written by deploy/node/spark.sh: the environment of this host's Spark daemons and their executors."
  printf 'export SPARK_HOME=%q\n' "$SPARK_HOME"
  printf 'export JAVA_HOME=%q\n' "$JAVA_HOME"
  printf 'export SPARK_LOCAL_IP=%q\n' "$KL_HOST"
  printf 'export SPARK_WORKER_DIR=%q\n' "$SPARK_WORK"
  printf 'export SPARK_LOG_DIR=%q\n' "$KL_STATE_DIR"
  printf 'export PYSPARK_PYTHON=%q\n' "$KL_VENV/bin/python"
  echo "# The kafkalite source reads the partitions this broker holds from here (pipeline/remote.py)."
  printf 'export KAFKALITE_DATA_DIR=%q\n' "$KL_DATA_DIR"
} | put_file "$SPARK_ENV" 644
worker_args=(org.apache.spark.deploy.worker.Worker "$A_MASTER" --host "$KL_HOST" --webui-port "$WORKER_UI")
[ -z "$A_CORES" ] || worker_args+=(--cores "$A_CORES")
[[ $A_UI =~ ^([0-9]+),([0-9]+)$ ]] || die "--webui-ports must be MASTER,WORKER port numbers, got '$A_UI'"
MASTER_UI=${BASH_REMATCH[1]} WORKER_UI=${BASH_REMATCH[2]}
[ -z "$A_MEMORY" ] || worker_args+=(--memory "$A_MEMORY")
launcher() { # $1 pid file, then the spark-class arguments
  local pidfile=$1
  shift
  echo "#!/usr/bin/env bash"
  echo "# Written by deploy/node/spark.sh; its unit runs it (ExecStart), and so does spark.sh --no-systemd."
  echo "set -euo pipefail"
  printf 'source %q\n' "$SPARK_ENV"
  printf 'echo "$$" >%q\n' "$pidfile"
  printf 'exec %q' "$SPARK_HOME/bin/spark-class"
  printf ' %q' "$@"
  echo
}
launcher "$WORKER_PIDFILE" "${worker_args[@]}" | put_file "$WORKER_RUN" 755
if [ "$RUN_MASTER" = 1 ]; then
  launcher "$MASTER_PIDFILE" org.apache.spark.deploy.master.Master --host "$KL_HOST" --port "$MASTER_PORT" \
    --webui-port "$MASTER_UI" | put_file "$MASTER_RUN" 755
fi

# --- 3. units (systemd) ----------------------------------------------------------------------------------
unit() { # $1 description, $2 launcher, $3 after
  cat <<EOF
# Written by deploy/node/spark.sh.
[Unit]
Description=$1
Wants=network-online.target
After=network-online.target $3

[Service]
Type=simple
User=$KL_USER
Group=$KL_GROUP
ExecStart=$2
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target
EOF
}
if [ "$NO_SYSTEMD" != 1 ]; then
  mkdir -p "$KL_UNIT_DIR"
  if [ "$RUN_MASTER" = 1 ]; then
    unit "Spark standalone master next to Kafka Lite broker $KL_BROKER_ID" "$MASTER_RUN" "" |
      put_file "$KL_UNIT_DIR/$MASTER_UNIT" 644
  fi
  unit "Spark standalone worker next to Kafka Lite broker $KL_BROKER_ID" "$WORKER_RUN" "$KL_UNIT" |
    put_file "$KL_UNIT_DIR/$WORKER_UNIT" 644
fi

# --- 4. run them -----------------------------------------------------------------------------------------
if [ "$NO_START" = 1 ]; then
  note "$CHANGES changes"
  exit 0
fi
if [ "$NO_SYSTEMD" = 1 ]; then
  # shellcheck disable=SC2317 # called by kl_start_detached
  started_pid() { kl_pid_of "$START_PIDFILE" "$START_WHAT"; }
  start_one() { # $1 launcher, $2 pid file, $3 what, $4 log
    local pid
    pid=$(kl_pid_of "$2" "$3")
    if [ -n "$pid" ] && [ "$CHANGES" != 0 ]; then
      kl_stop_pid "$pid"
      pid=""
    fi
    if [ -z "$pid" ]; then
      START_PIDFILE=$2 START_WHAT=$3
      kl_start_detached "$1" "$4" started_pid || die "$(basename "$1") did not start (log: $4)"
      note "started $(basename "$1") (log $4)"
    fi
  }
  if [ "$RUN_MASTER" = 1 ]; then
    start_one "$MASTER_RUN" "$MASTER_PIDFILE" deploy.master.Master "$KL_STATE_DIR/spark-master.log"
  fi
  start_one "$WORKER_RUN" "$WORKER_PIDFILE" deploy.worker.Worker "$KL_STATE_DIR/spark-worker.log"
  note "$CHANGES changes"
  exit 0
fi
if [ -z "$A_ROOT" ]; then
  systemctl daemon-reload
  units=("$WORKER_UNIT")
  [ "$RUN_MASTER" = 0 ] || units=("$MASTER_UNIT" "$WORKER_UNIT")
  systemctl enable "${units[@]}" >&2
  if [ "$CHANGES" != 0 ]; then
    systemctl restart "${units[@]}"
  else
    systemctl start "${units[@]}"
  fi
fi
note "$CHANGES changes"
